"""``GpuConfig``: sharing one GPU between the containers and pods of a claim.

``apiVersion: gpu.nvidia.drakit.io/v1alpha1``, ``kind: GpuConfig``::

    sharing:
      strategy: TimeSlicing          # or MPS
      timeSlicingConfig: {interval: Default}     # Default | Short | Medium | Long
      # mpsConfig: {defaultActiveThreadPercentage: 50, defaultPinnedDeviceMemoryLimit: 10Gi}

Every container that references the claim sees the same GPU (the same device nodes and
``NVIDIA_VISIBLE_DEVICES``). Time-slicing sets the GPU's compute mode to ``DEFAULT`` (and a
non-default interval with ``nvidia-smi compute-policy``); MPS sets ``EXCLUSIVE_PROCESS`` and
hands the containers the MPS client environment and the node's pipe directory. The MPS
control daemon itself must run on the node (``docs/gpu-backends.md``).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from drakit.models import Quantity

__all__ = [
    "GPU_CONFIG_API_VERSION",
    "INTERVALS",
    "GpuConfig",
    "MpsConfig",
    "Sharing",
    "TimeSlicingConfig",
    "quantity_bytes",
]

GPU_CONFIG_API_VERSION = "gpu.nvidia.drakit.io/v1alpha1"
INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
"""Interval name -> ``nvidia-smi compute-policy --set-timeslice`` value."""

_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity_bytes(q: str) -> int:
    """Bytes in a memory quantity (``10Gi``, ``512M``, ``1073741824``).

    Raises:
        ValueError: not a whole number of bytes with a memory suffix.
    """
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", q)
    if m is None:
        raise ValueError(f"{q!r} is not a memory size (examples: 512Mi, 10Gi)")
    value = Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    if value != value.to_integral_value():
        raise ValueError(f"{q!r} is not a whole number of bytes")
    return int(value)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TimeSlicingConfig(_Strict):
    """``sharing.timeSlicingConfig``."""

    interval: Literal["Default", "Short", "Medium", "Long"] = "Default"


class MpsConfig(_Strict):
    """``sharing.mpsConfig``: defaults every MPS client of the claim gets."""

    default_active_thread_percentage: StrictInt | None = Field(
        default=None, ge=1, le=100, alias="defaultActiveThreadPercentage"
    )
    default_pinned_device_memory_limit: Quantity | None = Field(
        default=None, alias="defaultPinnedDeviceMemoryLimit"
    )

    @model_validator(mode="after")
    def _memory(self) -> Self:
        if self.default_pinned_device_memory_limit is not None:
            try:
                size = quantity_bytes(self.default_pinned_device_memory_limit)
            except ValueError as e:
                raise ValueError(f"defaultPinnedDeviceMemoryLimit: {e}") from None
            if size < 2**20:
                raise ValueError(
                    "defaultPinnedDeviceMemoryLimit: MPS limits are whole MiB; give at least 1Mi"
                )
        return self

    @property
    def pinned_mib(self) -> int | None:
        """The pinned memory limit in MiB (``None`` when not set)."""
        q = self.default_pinned_device_memory_limit
        return None if q is None else quantity_bytes(q) // 2**20


class Sharing(_Strict):
    """``sharing``: how the claim's containers share its GPUs."""

    strategy: Literal["TimeSlicing", "MPS"]
    time_slicing: TimeSlicingConfig | None = Field(default=None, alias="timeSlicingConfig")
    mps: MpsConfig | None = Field(default=None, alias="mpsConfig")

    @model_validator(mode="after")
    def _matching(self) -> Self:
        if self.strategy == "TimeSlicing" and self.mps is not None:
            raise ValueError("mpsConfig: only applies to strategy MPS; remove it or use MPS")
        if self.strategy == "MPS" and self.time_slicing is not None:
            raise ValueError(
                "timeSlicingConfig: only applies to strategy TimeSlicing; remove it or use "
                "TimeSlicing"
            )
        return self


class GpuConfig(_Strict):
    """The per-claim opaque config of the NVIDIA backend."""

    api_version: Literal["gpu.nvidia.drakit.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["GpuConfig"]
    sharing: Sharing | None = None
