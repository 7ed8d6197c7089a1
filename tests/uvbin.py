"""The uv binary for the tests that build environments, from ``hack/ensure-uv.sh``."""

from __future__ import annotations

import subprocess

from tests.public_api import REPO_ROOT


def uv() -> str:
    """The path of uv (``hack/ensure-uv.sh`` finds or fetches it)."""
    return subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "ensure-uv.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
