"""The NVML seam: where this backend asks what GPUs the node has.

On a node the answer comes from NVML (the ``pynvml`` bindings, an optional dependency); on a
simulated root from the fake NVML description the simulator writes
(``<root>/drakit-sim/nvml.json``, contract in ``docs/simulated-hardware.md``). Everything NVML
does not own (NUMA node, PCIe root) is read from sysfs by the plugin in both cases.
"""

from __future__ import annotations

from pathlib import Path

from drakit.errors import PermanentError
from drakit.sim.nvml import NVML_DESCRIPTION_PATH, NvmlDescription, load_nvml_description

__all__ = ["read_nvml"]


def read_nvml(root: Path, source: str) -> NvmlDescription | None:
    """What NVML reports on this node, or ``None`` when there are no NVIDIA GPUs.

    Args:
        root: the sysfs root.
        source: ``auto`` (the fake description if the root has one, else NVML), ``sim`` or
            ``nvml``.

    Raises:
        PermanentError: NVML was asked for but cannot be used here.
    """
    fake = root / NVML_DESCRIPTION_PATH
    if source == "sim" or (source == "auto" and fake.exists()):
        return load_nvml_description(root) if fake.exists() else None
    try:
        import pynvml  # type: ignore[import-not-found]  # noqa: F401, PLC0415 - optional
    except ImportError:
        if source == "nvml":
            raise PermanentError(
                "plugins.nvidia_gpu.nvml: NVML bindings are not installed; "
                "install nvidia-ml-py on the node image or set nvml: sim with a simulated root"
            ) from None
        return None
    raise PermanentError(
        "plugins.nvidia_gpu.nvml: reading real NVML is not implemented yet; "
        "use a simulated profile (nvml: sim)"
    )
