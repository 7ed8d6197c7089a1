"""``plugins.composite``: which backends' devices to pair, how far apart, and what to publish."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from drakit.config import PluginSettings
from drakit_composite.pairing import Coupling

__all__ = ["CompositeSettings", "LockedShares"]


class LockedShares(BaseModel):
    """One entry of ``plugins.composite.locked``: a member's devices divided into fixed shares.

    Every device of ``plugin`` with the consumable capacity ``capacity`` (e.g. each of the CPU
    backend's per-NUMA-node groups) is published ``shares`` more times as
    ``<device>-share-<i>``, each owning ``1/shares`` of the device: it consumes that fraction
    of the device's counter set and is allocated whole (seed 000's locked-in mode,
    ``docs/composite.md``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    plugin: str = Field(min_length=1, description="The member backend whose devices are divided")
    capacity: str = Field(
        default="cpu", min_length=1, description="The member's consumable capacity to divide"
    )
    shares: int = Field(ge=2, le=64, description="Shares per device (must divide its capacity)")
    devices: tuple[str, ...] = Field(
        default=(), description="Only these member devices (default: every one with the capacity)"
    )


class CompositeSettings(PluginSettings):
    """``plugins.composite``.

    The member backends must publish under the composite's own driver (``driver`` of each
    section set to one name): a pair and its members share counter sets only inside one pool of
    one driver (``docs/composite.md``).
    """

    gpu_plugins: tuple[str, ...] = Field(
        default=("nvidia_gpu", "amd_gpu"),
        description="Backends whose GPUs are paired (if enabled); empty: no pairs",
    )
    nic_plugins: tuple[str, ...] = Field(
        default=("amd_ainic",),
        description="Backends whose NICs are paired (if enabled); empty: no pairs",
    )
    gpu_types: tuple[str, ...] = Field(
        default=("gpu", "amdgpu"),
        min_length=1,
        description="Values of a GPU backend's ``type`` attribute that are whole GPUs",
    )
    nic_types: tuple[str, ...] = Field(
        default=("pf", "shared"),
        min_length=1,
        description="Values of a NIC backend's ``type`` attribute that are whole NICs",
    )
    max_distance: int | None = Field(
        default=None, ge=1, description="Do not pair devices further apart (PCI hops)"
    )
    max_coupling: Coupling = Field(
        default="system",
        description="Do not pair devices coupled more loosely (switch, root, numa, system)",
    )
    numa_classes: int = Field(
        default=2,
        ge=0,
        le=16,
        description="Per-NUMA DeviceClasses to publish (gpu-nic-pair-numa0 ..); 0 for none",
    )

    locked: tuple[LockedShares, ...] = Field(
        default=(),
        description="Members divided into fixed shares (locked-in mode), e.g. CPUs per NUMA node",
    )

    def member_plugins(self) -> tuple[str, ...]:
        """The GPU and NIC backends and the backends of ``locked``.

        Enabled ones publish under the composite's driver unless their section sets another
        (which the composite refuses).
        """
        locked = tuple(e.plugin for e in self.locked)
        return tuple(dict.fromkeys((*self.gpu_plugins, *self.nic_plugins, *locked)))
