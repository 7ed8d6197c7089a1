#!/usr/bin/env bash
# Build the NVIDIA container toolkit's nvidia-ctk and nvidia-cdi-hook from the Go module proxy,
# for the tests that run drakit's toolkit mode (driver_files: toolkit) against the real binary:
# `nvidia-ctk cdi generate --mode=management` runs against a simulated driver root without a GPU
# (it finds the driver's files by name and needs no NVML; docs/gpu-backends.md).
#
# The version is pinned below (`go install pkg@version` verifies the module against the Go
# checksum database). Binaries are cached under
# ${DRAKIT_CACHE_DIR:-~/.cache/drakit}/nvidia-ctk/<versions-key>/bin; a warm cache is a no-op.
# A cold build (empty Go module and build caches) took 71 s on 2 cores (module download, cgo for
# go-nvml's bindings); with warm Go caches 4 s.
#
# usage:
#   hack/nvidia-ctk/build.sh                  build (or reuse); prints the bin dir on stdout
#   hack/nvidia-ctk/build.sh --print-bin-dir  print the bin dir for this pin, build nothing
#
# env:
#   DRAKIT_NVIDIA_CTK_BIN_DIR  use prebuilt binaries from this dir; nothing is built
#   DRAKIT_CACHE_DIR           cache root (default ${XDG_CACHE_HOME:-~/.cache}/drakit)
#   GOTOOLCHAIN                default "local": never download another Go toolchain
#
# Progress goes to stderr; stdout carries only the bin dir.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAG="nvidia-ctk build"
SCRIPT=hack/nvidia-ctk/build.sh
# shellcheck source=../lib/buildcache.sh
source "$HERE/../lib/buildcache.sh"
TOOLKIT=github.com/NVIDIA/nvidia-container-toolkit@v1.20.2
BINARIES=(nvidia-ctk nvidia-cdi-hook)

export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

mode=build
case "${1:-}" in
  "") ;;
  --print-bin-dir) mode=print ;;
  -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

use_prebuilt DRAKIT_NVIDIA_CTK_BIN_DIR "${BINARIES[@]}"

KEY=$(cat "$HERE/build.sh" "$HERE/../lib/buildcache.sh" | sha256sum | cut -c1-12)
CACHE_ROOT=$(cache_dir nvidia-ctk)
OUT=$CACHE_ROOT/$KEY
BIN=$OUT/bin
if [[ $mode == print ]]; then printf '%s\n' "$BIN"; exit 0; fi

up_to_date() { have_binaries .complete; }
reuse_if_built

command -v go >/dev/null 2>&1 || die "Go toolchain not found ('go' is not on PATH); prebuilt binaries can be given with DRAKIT_NVIDIA_CTK_BIN_DIR"
lock_cache

stage=$OUT/stage
rm -rf "$stage"
mkdir -p "$stage" "$BIN"
start=$SECONDS
log "nvidia-container-toolkit ${TOOLKIT#*@}; $(go env GOVERSION)"
# cgo: go-nvml's bindings (dlopen of libnvidia-ml at run time; nothing is linked)
if ! env CGO_ENABLED=1 GOBIN="$stage" go install -trimpath -ldflags="-s -w" \
    "${TOOLKIT%@*}/cmd/nvidia-ctk@${TOOLKIT#*@}" \
    "${TOOLKIT%@*}/cmd/nvidia-cdi-hook@${TOOLKIT#*@}" >"$OUT/build.log" 2>&1; then
  tail -30 "$OUT/build.log" >&2
  die "go install failed (full log: $OUT/build.log)"
fi
for b in "${BINARIES[@]}"; do
  [[ -x $stage/$b ]] || die "the build produced no '$b'"
  mv -f "$stage/$b" "$BIN/$b"
done
rm -rf "$stage"
touch "$OUT/.complete"
log "done in $((SECONDS - start))s: $("$BIN/nvidia-ctk" --version | head -1)"
printf '%s\n' "$BIN"
