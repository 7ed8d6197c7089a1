#!/usr/bin/env bash
# Install drakit and its backend distributions into a fresh virtual environment, exactly as the
# image does (deployments/Dockerfile runs this script): the third-party dependencies pinned by
# uv.lock, with their hashes, and wheels built from this checkout, nothing resolved anew.
#
# usage: deployments/image/install.sh VENV_DIR [WHEEL_DIR]
#
# env:
#   DRAKIT_IMAGE_PYTHON   interpreter of the virtual environment (default: python3 on PATH)
#   UV                    the uv binary (default: uv on PATH)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The distributions the image ships: the core and every backend (not the test fixtures).
PACKAGES=(drakit drakit-cpu drakit-nvidia-gpu drakit-amd-gpu drakit-amd-ainic drakit-composite)

die() { printf 'deployments/image/install.sh: %s\n' "$*" >&2; exit 1; }

venv=${1:-}
[[ -n $venv ]] || die "usage: deployments/image/install.sh VENV_DIR [WHEEL_DIR]"
wheels=${2:-$(mktemp -d /tmp/drakit-wheels.XXXXXX)}
uv=${UV:-uv}
command -v "$uv" >/dev/null 2>&1 || die "uv not found (set UV=/path/to/uv or put it on PATH)"
python=${DRAKIT_IMAGE_PYTHON:-python3}
[[ ! -e $venv ]] || die "$venv exists; give a path for a new virtual environment"

mkdir -p "$wheels"
cd "$ROOT"
# Every dependency of the shipped distributions, as locked, with hashes; the workspace's own
# packages come as wheels below.
export_args=(--frozen --no-dev --no-emit-workspace --format requirements-txt)
for p in "${PACKAGES[@]}"; do export_args+=(--package "$p"); done
"$uv" export "${export_args[@]}" --output-file "$wheels/requirements.txt" >/dev/null
for p in "${PACKAGES[@]}"; do
  "$uv" build --quiet --wheel --package "$p" --out-dir "$wheels"
done
"$uv" venv --quiet --python "$python" "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" --require-hashes --no-deps \
  --requirement "$wheels/requirements.txt"
"$uv" pip install --quiet --python "$venv/bin/python" --no-deps "$wheels"/*.whl
"$uv" pip check --quiet --python "$venv/bin/python" || die "the installed set is inconsistent (uv pip check)"
"$venv/bin/drakit" --version
