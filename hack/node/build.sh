#!/usr/bin/env bash
# Build the container runtime side of a real Kubernetes node from the Go module proxy:
# containerd, ctr and the runc shim, runc, and the CNI plugins the test node uses. The kubelet
# comes from the control plane's wrapper module (hack/control-plane/build.sh builds it beside
# kube-apiserver: same pins, same replace list).
#
# Versions are pinned below (they are the lock: `go install pkg@version` verifies every module
# against the Go checksum database). Binaries are cached under
# ${DRAKIT_CACHE_DIR:-~/.cache/drakit}/node/<versions-key>/bin; a warm cache is a no-op.
#
# runc needs cgo (its nsenter) and libseccomp. Debian's libseccomp-dev is downloaded into the
# cache and linked statically from there (`apt-get download` + `dpkg-deb -x`): nothing is
# installed on the host, and runc does not depend on the host's libseccomp.
#
# usage:
#   hack/node/build.sh                  build (or reuse); prints the bin dir on stdout
#   hack/node/build.sh --print-bin-dir  print the bin dir for these pins, build nothing
#
# env:
#   DRAKIT_NODE_BIN_DIR  use prebuilt binaries from this dir; nothing is built
#   DRAKIT_CACHE_DIR     cache root (default ${XDG_CACHE_HOME:-~/.cache}/drakit)
#   GOTOOLCHAIN          default "local": never download another Go toolchain
#
# Progress goes to stderr; stdout carries only the bin dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAG="node build"
SCRIPT=hack/node/build.sh
# shellcheck source=../lib/buildcache.sh
source "$HERE/../lib/buildcache.sh"
CONTAINERD=github.com/containerd/containerd/v2@v2.4.2
RUNC=github.com/opencontainers/runc@v1.5.3
CNI=github.com/containernetworking/plugins@v1.10.0
CNI_PLUGINS=(bridge host-local loopback)
BINARIES=(containerd ctr containerd-shim-runc-v2 runc "${CNI_PLUGINS[@]}")

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

mode=build
case "${1:-}" in
  "") ;;
  --print-bin-dir) mode=print ;;
  -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

use_prebuilt DRAKIT_NODE_BIN_DIR "${BINARIES[@]}"

KEY=$(cat "$HERE/build.sh" "$HERE/../lib/buildcache.sh" | sha256sum | cut -c1-12)
CACHE_ROOT=$(cache_dir node)
OUT=$CACHE_ROOT/$KEY
BIN=$OUT/bin
if [[ $mode == print ]]; then printf '%s\n' "$BIN"; exit 0; fi

up_to_date() { have_binaries .complete; }
reuse_if_built

command -v go >/dev/null 2>&1 || die "Go toolchain not found ('go' is not on PATH; Go >= 1.26 builds the node); prebuilt binaries can be given with DRAKIT_NODE_BIN_DIR"
lock_cache

stage=$OUT/stage
rm -rf "$stage"
mkdir -p "$stage" "$BIN"
LDF="-s -w"

step() {  # step LABEL CMD...: run one build step, its output to a log, its time to stderr
  local label=$1 start=$SECONDS logf="$OUT/build-$1.log"
  shift
  if ! "$@" >"$logf" 2>&1; then
    tail -30 "$logf" >&2
    die "$label failed (full log: $logf)"
  fi
  log "$label: done in $((SECONDS - start))s"
}

log "containerd ${CONTAINERD#*@}, runc ${RUNC#*@}, CNI plugins ${CNI#*@}; $(go env GOVERSION)"
step containerd env CGO_ENABLED=0 GOBIN="$stage" go install -trimpath -ldflags="$LDF" \
  -tags "urfave_cli_no_docs no_btrfs no_devmapper no_zfs" \
  "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD#*@}" \
  "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD#*@}"
step shim env CGO_ENABLED=0 GOBIN="$stage" go install -trimpath -ldflags="$LDF" \
  -tags "urfave_cli_no_docs no_grpc" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD#*@}"

# libseccomp headers and the link-time .so from Debian's package, kept in the cache.
seccomp=$OUT/libseccomp
if [[ ! -f $seccomp/usr/include/seccomp.h ]]; then
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: runc needs libseccomp-dev's headers (or give DRAKIT_NODE_BIN_DIR)"
  rm -rf "$seccomp" "$OUT/deb"
  mkdir -p "$seccomp" "$OUT/deb"
  (cd "$OUT/deb" && apt-get download libseccomp-dev libseccomp2) >"$OUT/build-libseccomp.log" 2>&1 \
    || { tail -5 "$OUT/build-libseccomp.log" >&2; die "apt-get download libseccomp-dev failed"; }
  for deb in "$OUT"/deb/*.deb; do dpkg-deb -x "$deb" "$seccomp"; done
  rm -rf "$OUT/deb"
fi
libdir=$seccomp/usr/lib/x86_64-linux-gnu
step runc env CGO_ENABLED=1 GOBIN="$stage" \
  CGO_CFLAGS="-I$seccomp/usr/include" CGO_LDFLAGS="-L$libdir" \
  PKG_CONFIG_PATH="$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$seccomp" \
  go install -trimpath -ldflags="$LDF -extldflags -static" \
  -tags "seccomp urfave_cli_no_docs netgo osusergo" "$RUNC"
pkgs=()
for p in "${CNI_PLUGINS[@]}"; do
  case $p in
    bridge|loopback) pkgs+=("github.com/containernetworking/plugins/plugins/main/$p@${CNI#*@}") ;;
    host-local) pkgs+=("github.com/containernetworking/plugins/plugins/ipam/$p@${CNI#*@}") ;;
  esac
done
step cni env CGO_ENABLED=0 GOBIN="$stage" go install -trimpath -ldflags="$LDF" "${pkgs[@]}"

for b in "${BINARIES[@]}"; do
  [[ -x $stage/$b ]] || die "the build produced no '$b'"
  mv -f "$stage/$b" "$BIN/$b"
done
rm -rf "$stage"
touch "$OUT/.complete"
log "$("$BIN/containerd" --version); $("$BIN/runc" --version | head -1)"
log "binaries: $BIN ($(du -sh "$BIN" | cut -f1))"
printf '%s\n' "$BIN"
