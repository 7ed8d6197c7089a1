#!/usr/bin/env bash
# Print the path of a working `uv`, installing it from PyPI into ~/.local if it is missing.
set -euo pipefail
if command -v uv >/dev/null 2>&1; then command -v uv; exit 0; fi
if [[ -x "$HOME/.local/bin/uv" ]]; then echo "$HOME/.local/bin/uv"; exit 0; fi
echo "[drakit] uv not found: installing it from PyPI (python3 -m pip install --user uv)" >&2
python3 -m pip install --quiet --user uv >&2 \
  || python3 -m pip install --quiet --user --break-system-packages uv >&2
if command -v uv >/dev/null 2>&1; then command -v uv; else echo "$HOME/.local/bin/uv"; fi
