"""The fake NVML seam: a JSON description of NVIDIA GPUs that a simulated root carries.

Real NVML cannot be loaded without a driver, so the simulator writes what NVML would answer to
``<root>/drakit-sim/nvml.json`` and the NVIDIA backend's discovery seam reads it instead of
calling ``pynvml``. Everything NVML does *not* own (NUMA node, pcieRoot, PCI ids) stays in the
simulated sysfs, exactly as on a real node. The format is documented in
``docs/simulated-hardware.md`` ("The fake NVML contract").
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "NVML_DESCRIPTION_PATH",
    "NvmlDescription",
    "NvmlGpu",
    "gpu_uuid",
    "load_nvml_description",
]

NVML_DESCRIPTION_PATH = Path("drakit-sim") / "nvml.json"
"""Where the description lives, relative to the simulated root."""

_UUID_NAMESPACE = uuid.UUID("6f1c4f7e-3b5d-4f6a-9a52-6472616b6974")
_BDF = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"


def gpu_uuid(seed: str) -> str:
    """A deterministic NVML-style GPU UUID (``GPU-xxxxxxxx-xxxx-...``) derived from ``seed``."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, seed)}"


class NvmlGpu(BaseModel):
    """What NVML reports for one GPU.

    Attributes:
        index: ``nvmlDeviceGetIndex`` (enumeration order, by PCI bus id).
        minor_number: ``nvmlDeviceGetMinorNumber`` (``/dev/nvidia<minor>``).
        uuid: ``nvmlDeviceGetUUID``.
        name: ``nvmlDeviceGetName`` (e.g. ``NVIDIA H100 80GB HBM3``).
        brand: brand as go-nvlib names it (``Nvidia``, ``Tesla``...).
        architecture: ``Hopper``, ``Blackwell``... (go-nvlib strings).
        cuda_compute_capability: ``nvmlDeviceGetCudaComputeCapability`` as ``[major, minor]``.
        pci_bus_id: sysfs spelling ``0000:1b:00.0`` (NVML's ``00000000:1B:00.0`` is
            :attr:`nvml_bus_id`).
        memory_total_bytes: ``nvmlDeviceGetMemoryInfo(h).total``.
        serial: ``nvmlDeviceGetSerial``.
        mig_capable: whether ``nvmlDeviceGetMigMode`` is supported.
        mig_enabled: current MIG mode.
        module_id: ``nvmlDeviceGetModuleId`` (1-based position on the baseboard).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    minor_number: int = Field(ge=0)
    uuid: str = Field(pattern=r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    name: str
    brand: str
    architecture: str
    cuda_compute_capability: tuple[int, int]
    pci_bus_id: str = Field(pattern=_BDF)
    memory_total_bytes: int = Field(gt=0)
    serial: str
    mig_capable: bool
    mig_enabled: bool = False
    module_id: int = Field(ge=0)

    @property
    def nvml_bus_id(self) -> str:
        """The bus id as NVML spells it: 8-digit domain, uppercase hex (``00000000:1B:00.0``)."""
        return f"0000{self.pci_bus_id}".upper()


class NvmlDescription(BaseModel):
    """The whole ``nvml.json`` file.

    Attributes:
        kind: always ``NvmlDescription``.
        version: format version; bumped on incompatible change.
        driver_version: ``nvmlSystemGetDriverVersion`` (``580.126.20``).
        cuda_driver_version: ``nvmlSystemGetCudaDriverVersion`` as NVML's integer (13000 = 13.0).
        devices: the GPUs, ordered by index.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["NvmlDescription"] = "NvmlDescription"
    version: Literal[1] = 1
    driver_version: str
    cuda_driver_version: int
    devices: tuple[NvmlGpu, ...]

    def to_json(self) -> str:
        """The file's exact text (stable key order, two-space indent, trailing newline)."""
        return self.model_dump_json(indent=2) + "\n"


def load_nvml_description(root: Path) -> NvmlDescription:
    """Read and validate ``<root>/drakit-sim/nvml.json``.

    Args:
        root: the simulated root (the directory holding ``sys/`` and ``proc/``).

    Raises:
        FileNotFoundError: the root has no NVML description (no NVIDIA GPUs simulated).
        pydantic.ValidationError: the file does not follow the contract.
    """
    text = (root / NVML_DESCRIPTION_PATH).read_text(encoding="utf-8")
    return NvmlDescription.model_validate_json(text)
