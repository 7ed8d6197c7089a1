#!/usr/bin/env bash
# Build the helm CLI (helm.sh/helm/v3) from the Go module proxy, for linting and rendering
# deployments/helm/drakit in CI.
#
# The wrapper module in this directory (go.mod/go.sum) pins helm and is the lock file: builds
# use -mod=readonly, so CI compiles exactly the committed dependency graph. The binary is cached
# under ~/.cache/drakit/helm/<version>-<key>/bin/helm, keyed by go.mod, go.sum and this script.
#
# usage:
#   hack/helm/build.sh                     build (or reuse) helm; prints the binary's path on stdout
#   hack/helm/build.sh --print-bin         print the binary's path for the current lock, build nothing
#   hack/helm/build.sh --update-lock [v3.X.Y]
#                                          regenerate go.mod/go.sum (default: the pinned version)
#
# env:
#   DRAKIT_HELM_BIN    use this prebuilt helm binary; nothing is built
#   DRAKIT_CACHE_DIR   cache root (default ${XDG_CACHE_HOME:-~/.cache}/drakit)
#   GOTOOLCHAIN        default "local": never download another Go toolchain
#
# Progress goes to stderr; stdout carries only the binary's path.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NEEDED_HINT="a prebuilt helm v3 can be provided via DRAKIT_HELM_BIN=/path/to/helm"
HEADER='// The helm CLI that CI uses to lint and render deployments/helm/drakit, built from the Go module
// proxy by hack/helm/build.sh. go.sum is the lock: bump the version with build.sh --update-lock.'

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export CGO_ENABLED=0

log() { printf '[helm build] %s\n' "$*" >&2; }
die() { printf 'hack/helm/build.sh: %s\n' "$*" >&2; exit 1; }

mode=build
update_version=
case "${1:-}" in
  "") ;;
  --print-bin) mode=print ;;
  --update-lock) mode=lock; update_version=${2:-} ;;
  -h|--help) sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

if [[ -n "${DRAKIT_HELM_BIN:-}" && $mode != lock ]]; then
  [[ -x "$DRAKIT_HELM_BIN" ]] || die "DRAKIT_HELM_BIN=$DRAKIT_HELM_BIN is not an executable file"
  log "using prebuilt helm DRAKIT_HELM_BIN=$DRAKIT_HELM_BIN"
  printf '%s\n' "$DRAKIT_HELM_BIN"
  exit 0
fi

require_go() {
  command -v go >/dev/null 2>&1 \
    || die "Go toolchain not found ('go' is not on PATH; Go >= 1.26 is needed to build helm); $NEEDED_HINT"
}

helm_version() { awk '$1 == "helm.sh/helm/v3" {print $2; exit}' "$HERE/go.mod"; }

# ---------------------------------------------------------------- lock update
if [[ $mode == lock ]]; then
  require_go
  version=${update_version:-$(helm_version 2>/dev/null || true)}
  [[ $version =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "give the helm version to pin, e.g. --update-lock v3.22.0"
  printf '%s\nmodule drakit.local/helm\n\ngo 1.26.0\n\ntool helm.sh/helm/v3/cmd/helm\n\nrequire helm.sh/helm/v3 %s\n' \
    "$HEADER" "$version" >"$HERE/go.mod"
  rm -f "$HERE/go.sum"
  log "go mod tidy for helm.sh/helm/v3@$version through $(go env GOPROXY)"
  (cd "$HERE" && go mod tidy) || die "go mod tidy failed for helm.sh/helm/v3@$version"
  log "lock updated: $HERE/go.mod, $HERE/go.sum; commit both"
  exit 0
fi

# ---------------------------------------------------------------- cache key
[[ -f "$HERE/go.mod" && -f "$HERE/go.sum" ]] || die "missing $HERE/go.mod or go.sum (run --update-lock)"
HELM_VERSION=$(helm_version)
[[ $HELM_VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || die "cannot find the helm.sh/helm/v3 version in $HERE/go.mod"
KEY=$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/build.sh" | sha256sum | cut -c1-12)
OUT=${DRAKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/drakit}/helm/$HELM_VERSION-$KEY
HELM=$OUT/bin/helm

if [[ $mode == print ]]; then
  printf '%s\n' "$HELM"
  exit 0
fi

if [[ -x $HELM && -f $OUT/.complete ]]; then
  log "up to date: $HELM (helm $HELM_VERSION, key $KEY)"
  printf '%s\n' "$HELM"
  exit 0
fi

require_go
mkdir -p "$OUT/bin"
exec 9>"$OUT/.lock"
if ! flock -n 9; then
  log "another build holds $OUT/.lock; waiting"
  flock 9
fi
if [[ -x $HELM && -f $OUT/.complete ]]; then   # another process finished the build while we waited
  log "up to date: $HELM"
  printf '%s\n' "$HELM"
  exit 0
fi

cd "$HERE"
log "helm $HELM_VERSION, $(go env GOVERSION), GOTOOLCHAIN=$GOTOOLCHAIN, cache key $KEY"
log "downloading modules listed in go.sum through $(go env GOPROXY) (no-op when cached)"
if ! dl_err=$(go mod download 2>&1); then
  first=$(printf '%s\n' "$dl_err" | grep -m1 -E 'dial|lookup|timeout|refused|unreachable|proxy|TLS|EOF|requires go' \
    || printf '%s\n' "$dl_err" | tail -1)
  die "cannot fetch Go modules (GOPROXY=$(go env GOPROXY)): ${first:-unknown error}; $NEEDED_HINT"
fi

# The Kubernetes version helm assumes when no cluster is asked (helm template, helm lint's
# deprecation check) comes from the client-go it is built with, as upstream's Makefile does.
client_go=$(go list -mod=readonly -m -f '{{.Version}}' k8s.io/client-go)
[[ $client_go =~ ^v0\.([0-9]+)\.[0-9]+$ ]] || die "unexpected k8s.io/client-go version '$client_go' in the helm module graph"
k8s_minor=${BASH_REMATCH[1]}
LDF="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDF+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

start=$SECONDS
log "compiling helm (cold: a few minutes on 2 cores)"
if ! go build -mod=readonly -trimpath -buildvcs=false -ldflags="$LDF" -o "$OUT/bin/helm.tmp" \
    helm.sh/helm/v3/cmd/helm >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log" >&2
  die "compiling helm failed after $((SECONDS - start))s (full log: $OUT/build.log)"
fi
mv -f "$OUT/bin/helm.tmp" "$HELM"
touch "$OUT/.complete"
log "$("$HELM" version --short 2>&1) built in $((SECONDS - start))s: $HELM"
printf '%s\n' "$HELM"
