"""The container edits of a prepared GPU or MIG device.

A GPU brings its own node ``/dev/nvidia<minor>`` plus the control nodes every CUDA process
needs (``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``); a MIG device brings
its parent's nodes plus the two MIG capability nodes ``/dev/nvidia-caps/nvidia-cap<N>`` the
driver lists under ``/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``.
``NVIDIA_VISIBLE_DEVICES`` names every GPU/MIG UUID of the claim, so all devices of one claim
agree on it. Driver libraries and ``nvidia-smi`` are not injected here: they come from the
NVIDIA container toolkit's own CDI spec (``docs/gpu-backends.md``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

from drakit.errors import RetryableError
from drakit.models import CdiDeviceNode

__all__ = ["CONTROL_NODES", "VISIBLE_DEVICES", "gpu_nodes", "mig_cap_minor", "visible_env"]

CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_CONTROL = tuple(CdiDeviceNode(path=p) for p in CONTROL_NODES)  # the same for every GPU
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
_CAPS = Path("proc") / "driver" / "nvidia" / "capabilities"
_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)


def gpu_nodes(minor: int, caps: Sequence[int] = ()) -> tuple[CdiDeviceNode, ...]:
    """Device nodes of a GPU (and, for a MIG device, its capability minors)."""
    return (
        _gpu_node(minor),
        *_CONTROL,
        *(CdiDeviceNode(path=f"/dev/nvidia-caps/nvidia-cap{c}") for c in caps),
    )


@functools.lru_cache(maxsize=64)
def _gpu_node(minor: int) -> CdiDeviceNode:
    """``/dev/nvidia<minor>``, built once per GPU (a frozen model: one per process is enough)."""
    return CdiDeviceNode(path=f"/dev/nvidia{minor}")


def mig_cap_minor(root: Path, gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """The ``nvidia-cap`` minor of a GPU instance (or of one of its compute instances).

    Raises:
        RetryableError: the driver has not (yet) published the capability file.
    """
    path = root / _CAPS / f"gpu{gpu_minor}" / "mig" / f"gi{gi}"
    if ci is not None:
        path = path / f"ci{ci}"
    path = path / "access"
    try:
        text = path.read_text(encoding="ascii")
    except OSError as e:
        raise RetryableError(f"MIG capability {path} is not readable: {e}") from e
    m = _MINOR.search(text)
    if m is None:
        raise RetryableError(f"MIG capability {path} has no DeviceFileMinor line")
    return int(m.group(1))


def visible_env(uuids: Sequence[str]) -> str:
    """``NVIDIA_VISIBLE_DEVICES=<uuid>[,<uuid>...]``."""
    return f"{VISIBLE_DEVICES}={','.join(uuids)}"
