"""The fail-closed guard: a CDI mount that only drakit's NRI plugin removes (no NRI import).

Put into every device of a claim's CDI spec (``nri.fail_closed``): its source never exists, so
a runtime that injects the spec but never asked drakit's NRI plugin fails to start the
container, and the runtime's error names the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from drakit.models import CdiMount

__all__ = ["GUARD_DIR", "GUARD_SOURCE", "guard_mount"]

GUARD_DIR: Final = "/run/drakit/nri-guard"
"""Where the fail-closed guard mounts land in a container (one per device: ``<dir>/<name>``)."""
GUARD_SOURCE: Final = "drakit-nri-plugin-did-not-process-this-container"
"""The guard's source file name (under the driver's state directory; it never exists), so the
runtime's error names the reason."""


def guard_mount(state_dir: Path, driver: str, device: str) -> CdiMount:
    """The fail-closed guard mount for one CDI device of ``driver``."""
    return CdiMount(
        host_path=str(state_dir / driver / GUARD_SOURCE),
        container_path=f"{GUARD_DIR}/{device}",
        options=("ro", "nosuid", "nodev", "bind"),
    )
