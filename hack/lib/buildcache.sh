# Sourced by hack/control-plane/build.sh and hack/node/build.sh: the steps their build caches
# share. The caller sets TAG (its log prefix), SCRIPT (its path, for errors) and BINARIES (the
# executables a complete build has), and defines up_to_date (0: the cache at $OUT is complete).
#
# Caches live under ${DRAKIT_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/drakit}/<kind>/<key>; a
# build holds <key>/.lock (flock) while it writes, so parallel runs build once and the others
# reuse the result.

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { printf '%s: %s\n' "$SCRIPT" "$*" >&2; exit 1; }

# cache_dir KIND: the cache directory of one kind of build (k8s, node).
cache_dir() { printf '%s/%s\n' "${DRAKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/drakit}" "$1"; }

# use_prebuilt VAR NAME...: when $VAR names a directory, check it has the executables NAME...,
# print it and exit (nothing is built).
use_prebuilt() {
  local var=$1 dir b
  shift
  dir=${!var:-}
  [[ -n $dir ]] || return 0
  for b in "$@"; do
    [[ -x "$dir/$b" ]] || die "$var=$dir has no executable '$b'"
  done
  log "using prebuilt binaries from $var=$dir"
  printf '%s\n' "$dir"
  exit 0
}

# have_binaries MARKER: the marker file and every executable of BINARIES are in $OUT, $BIN.
have_binaries() {
  [[ -f "$OUT/$1" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

# reuse_if_built: print $BIN and exit when up_to_date says the cache is complete.
reuse_if_built() {
  if up_to_date; then
    log "up to date: $BIN${1:+ ($1)}"
    printf '%s\n' "$BIN"
    exit 0
  fi
}

# lock_cache: create $OUT, take its lock (waiting for another build), then reuse what that
# build made. The lock is held on fd 9 until the script exits.
lock_cache() {
  mkdir -p "$OUT"
  exec 9>"$OUT/.lock"
  if ! flock -n 9; then
    log "another build holds $OUT/.lock; waiting"
    flock 9
  fi
  reuse_if_built  # another process finished the build while we waited
}
