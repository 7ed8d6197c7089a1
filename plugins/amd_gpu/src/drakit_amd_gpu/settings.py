"""``plugins.amd_gpu``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from drakit.config import PluginSettings

__all__ = ["AmdGpuSettings"]


class AmdGpuSettings(PluginSettings):
    """``plugins.amd_gpu``: partitions and health of AMD Instinct GPUs."""

    partitions: bool = Field(
        default=True,
        description="Publish the compute partitions of GPUs not in SPX mode (KEP-4815)",
    )
    whole_device_counters: bool = Field(
        default=False,
        description="Make every full GPU consume a counter set of its own, also without a "
        "composite, for a Kueue that charges counters (docs/multi-node.md#kueue); an "
        "adminAccess claim on a GPU another claim holds is then never allocated",
    )
    taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Effect of the taint on an unhealthy GPU"
    )
