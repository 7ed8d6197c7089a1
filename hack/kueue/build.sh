#!/usr/bin/env bash
# Build the Kueue manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy and copy the
# CRDs and webhook configurations out of the module's config/ tree, for the Kueue e2e
# (tests/e2e/test_kueue.py, tests/e2e/kueueproc.py).
#
# The wrapper module in this directory (go.mod/go.sum) pins Kueue and is the lock file: builds
# use -mod=readonly, so CI compiles exactly the committed dependency graph. The binary and the
# manifests are cached under ~/.cache/drakit/kueue/<version>-<key>/{bin/kueue,crd/,webhook/}, keyed by go.mod,
# go.sum and this script; a second build of the same key is a no-op, concurrent builds wait on a
# flock.
#
# usage:
#   hack/kueue/build.sh                     build (or reuse); prints the cache dir on stdout
#   hack/kueue/build.sh --print-dir         print the cache dir for the current lock, build nothing
#   hack/kueue/build.sh --update-lock [v0.X.Y]
#                                           regenerate go.mod/go.sum (default: the pinned version)
#
# env:
#   DRAKIT_KUEUE_DIR   use a prebuilt tree (bin/kueue, crd/*.yaml, webhook/manifests.yaml); nothing is built
#   DRAKIT_CACHE_DIR   cache root (default ${XDG_CACHE_HOME:-~/.cache}/drakit)
#   GOTOOLCHAIN        default "local": never download another Go toolchain
#
# Progress goes to stderr; stdout carries only the cache dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NEEDED_HINT="a prebuilt tree (bin/kueue, crd/*.yaml from Kueue's config/components/crd/bases, webhook/manifests.yaml from config/components/webhook) can be provided via DRAKIT_KUEUE_DIR=/dir"
HEADER='// The Kueue manager that tests/e2e/test_kueue.py runs against the test control plane, built from
// the Go module proxy by hack/kueue/build.sh. go.sum is the lock: bump with build.sh --update-lock.'

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
export CGO_ENABLED=0

log() { printf '[kueue build] %s\n' "$*" >&2; }
die() { printf 'hack/kueue/build.sh: %s\n' "$*" >&2; exit 1; }

mode=build
update_version=
case "${1:-}" in
  "") ;;
  --print-dir) mode=print ;;
  --update-lock) mode=lock; update_version=${2:-} ;;
  -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

complete() { [[ -x $1/bin/kueue && -f $1/crd/kueue.x-k8s.io_clusterqueues.yaml && -f $1/webhook/manifests.yaml ]]; }

if [[ -n "${DRAKIT_KUEUE_DIR:-}" && $mode != lock ]]; then
  complete "$DRAKIT_KUEUE_DIR" \
    || die "DRAKIT_KUEUE_DIR=$DRAKIT_KUEUE_DIR lacks bin/kueue, crd/kueue.x-k8s.io_clusterqueues.yaml or webhook/manifests.yaml"
  log "using prebuilt Kueue DRAKIT_KUEUE_DIR=$DRAKIT_KUEUE_DIR"
  printf '%s\n' "$DRAKIT_KUEUE_DIR"
  exit 0
fi

require_go() {
  command -v go >/dev/null 2>&1 \
    || die "Go toolchain not found ('go' is not on PATH; Go >= 1.26 is needed to build Kueue); $NEEDED_HINT"
}

kueue_version() { awk '$1 == "sigs.k8s.io/kueue" {print $2; exit}' "$HERE/go.mod"; }

# ---------------------------------------------------------------- lock update
if [[ $mode == lock ]]; then
  require_go
  version=${update_version:-$(kueue_version 2>/dev/null || true)}
  [[ $version =~ ^v0\.[0-9]+\.[0-9]+$ ]] || die "give the Kueue version to pin, e.g. --update-lock v0.17.0"
  printf '%s\nmodule drakit.local/kueue\n\ngo 1.26.0\n\ntool sigs.k8s.io/kueue/cmd/kueue\n\nrequire sigs.k8s.io/kueue %s\n' \
    "$HEADER" "$version" >"$HERE/go.mod"
  rm -f "$HERE/go.sum"
  log "go mod tidy for sigs.k8s.io/kueue@$version through $(go env GOPROXY)"
  (cd "$HERE" && go mod tidy) || die "go mod tidy failed for sigs.k8s.io/kueue@$version"
  log "lock updated: $HERE/go.mod, $HERE/go.sum; commit both"
  exit 0
fi

# ---------------------------------------------------------------- cache key
[[ -f "$HERE/go.mod" && -f "$HERE/go.sum" ]] || die "missing $HERE/go.mod or go.sum (run --update-lock)"
KUEUE_VERSION=$(kueue_version)
[[ $KUEUE_VERSION =~ ^v0\.[0-9]+\.[0-9]+$ ]] || die "cannot find the sigs.k8s.io/kueue version in $HERE/go.mod"
KEY=$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/build.sh" | sha256sum | cut -c1-12)
OUT=${DRAKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/drakit}/kueue/$KUEUE_VERSION-$KEY

if [[ $mode == print ]]; then
  printf '%s\n' "$OUT"
  exit 0
fi

if complete "$OUT" && [[ -f $OUT/.complete ]]; then
  log "up to date: $OUT (kueue $KUEUE_VERSION, key $KEY)"
  printf '%s\n' "$OUT"
  exit 0
fi

require_go
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
if ! flock -n 9; then
  log "another build holds $OUT/.lock; waiting"
  flock 9
fi
if complete "$OUT" && [[ -f $OUT/.complete ]]; then   # another process finished while we waited
  log "up to date: $OUT"
  printf '%s\n' "$OUT"
  exit 0
fi

cd "$HERE"
log "sigs.k8s.io/kueue $KUEUE_VERSION, $(go env GOVERSION), GOTOOLCHAIN=$GOTOOLCHAIN, cache key $KEY"
log "downloading modules listed in go.sum through $(go env GOPROXY) (no-op when cached)"
if ! dl_err=$(go mod download 2>&1); then
  first=$(printf '%s\n' "$dl_err" | grep -m1 -E 'dial|lookup|timeout|refused|unreachable|proxy|TLS|EOF|requires go' \
    || printf '%s\n' "$dl_err" | tail -1)
  die "cannot fetch Go modules (GOPROXY=$(go env GOPROXY)): ${first:-unknown error}; $NEEDED_HINT"
fi

# The manifests come from the same module version as the binary: the CRDs
# (config/components/crd/bases) and the webhook configurations (config/components/webhook).
module_dir=$(go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kueue)
for d in config/components/crd/bases config/components/webhook; do
  [[ -d $module_dir/$d ]] || die "sigs.k8s.io/kueue@$KUEUE_VERSION has no $d"
done
rm -rf "$OUT/manifests.tmp" && mkdir -p "$OUT/manifests.tmp/crd" "$OUT/manifests.tmp/webhook" "$OUT/bin"
cp "$module_dir"/config/components/crd/bases/*.yaml "$OUT/manifests.tmp/crd/"
cp "$module_dir"/config/components/webhook/manifests.yaml "$OUT/manifests.tmp/webhook/"
chmod -R u+w,go-w "$OUT/manifests.tmp"

build_date=$(go list -mod=readonly -m -json sigs.k8s.io/kueue | sed -n 's/^[[:space:]]*"Time": "\(.*\)",*$/\1/p')
LDF="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
LDF+=" -X sigs.k8s.io/kueue/pkg/version.BuildDate=${build_date:-1970-01-01T00:00:00Z}"

start=$SECONDS
log "compiling the Kueue manager (cold: see docs/testing.md for the measured time on 2 cores)"
go build -v -mod=readonly -trimpath -buildvcs=false -ldflags="$LDF" -o "$OUT/bin/kueue.tmp" \
  sigs.k8s.io/kueue/cmd/kueue >"$OUT/build.log" 2>&1 &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  sleep 5
  if (( (SECONDS - start) % 60 < 5 )) && kill -0 "$pid" 2>/dev/null; then
    log "$(grep -c -v '^#' "$OUT/build.log" || true) packages compiled, $((SECONDS - start))s elapsed"
  fi
done
if ! wait "$pid"; then
  tail -30 "$OUT/build.log" >&2
  die "compiling Kueue failed after $((SECONDS - start))s (full log: $OUT/build.log)"
fi
mv -f "$OUT/bin/kueue.tmp" "$OUT/bin/kueue"
rm -rf "$OUT/crd" "$OUT/webhook"
mv "$OUT/manifests.tmp/crd" "$OUT/manifests.tmp/webhook" "$OUT/" && rmdir "$OUT/manifests.tmp"
touch "$OUT/.complete"
log "kueue $KUEUE_VERSION built in $((SECONDS - start))s: $OUT/bin/kueue ($(du -sh "$OUT/bin/kueue" | cut -f1))"
printf '%s\n' "$OUT"
