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
    taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Effect of the taint on an unhealthy GPU"
    )
