"""``plugins.composite``: which drivers' devices to pair, how far apart, and what to publish."""

from __future__ import annotations

from pydantic import Field

from drakit.config import PluginSettings
from drakit_composite.pairing import Coupling

__all__ = ["CompositeSettings"]


class CompositeSettings(PluginSettings):
    """``plugins.composite``."""

    gpu_driver: str = Field(default="gpu.nvidia.drakit.io", description="Driver of the GPUs")
    nic_driver: str = Field(default="ainic.amd.drakit.io", description="Driver of the NICs")
    max_distance: int | None = Field(
        default=None, ge=1, description="Do not pair devices further apart (PCI hops)"
    )
    max_coupling: Coupling = Field(
        default="system",
        description="Do not pair devices coupled more loosely (switch, root, numa, system)",
    )
    quota_counters: bool = Field(
        default=True,
        description=(
            "Publish each pair's GPU memory and NIC bandwidth as counters it consumes "
            "(what Kueue's counter quota path charges)"
        ),
    )
    numa_classes: int = Field(
        default=2,
        ge=0,
        le=16,
        description="Per-NUMA DeviceClasses to publish (gpu-nic-pair-numa0 ..); 0 for none",
    )
