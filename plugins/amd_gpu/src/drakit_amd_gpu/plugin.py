"""drakit backend for AMD Instinct GPUs: the hooks, over sysfs.

Discovery (:mod:`.discovery`) reads the DRM card's PCI device and the KFD topology;
:mod:`.devices` publishes every GPU and, for GPUs in a partitioned compute mode, their
partitions as partitionable devices. Prepare hands the container ``/dev/kfd`` plus the card and
render nodes of what it was allocated (:mod:`.prepare`). Health comes from sysfs
(:mod:`.health`): uncorrectable RAS errors, or a GPU missing from the KFD topology.
``docs/gpu-backends.md`` is the user-facing description.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.hookspecs import hookimpl
from drakit.models import (
    ClaimInfo,
    DeviceHealth,
    DeviceInventory,
    DeviceTaint,
    NodeInfo,
    PreparedDevice,
)
from drakit_amd_gpu.devices import Published, build_inventory, device_name
from drakit_amd_gpu.discovery import read_amd_gpus
from drakit_amd_gpu.health import TAINT, problem_of
from drakit_amd_gpu.prepare import prepare_devices
from drakit_amd_gpu.settings import AmdGpuSettings

__all__ = ["AmdGpuPlugin"]


class AmdGpuPlugin:
    """The AMD Instinct GPU backend; see the module docstring."""

    settings_model: ClassVar[type[PluginSettings]] = AmdGpuSettings
    default_driver: ClassVar[str] = "gpu.amd.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.settings = context.settings_as(AmdGpuSettings)
        self._published: dict[str, Published] = {}
        self._lock = threading.Lock()
        self._counters_dropped = False

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """AMD GPUs (and their partitions) from sysfs and the KFD topology."""
        gpus = read_amd_gpus(Path(node.sysfs_root))
        if not gpus:
            return None
        taints = {}
        for gpu in gpus:
            problem = problem_of(gpu)
            if problem is not None:
                taints[device_name(gpu)] = (
                    DeviceTaint(key=TAINT, value=problem[0], effect=self.settings.taint_effect),
                )
        if not self._counters_dropped and "consumesCounters" in self.ctx.dropped_fields():
            self._counters_dropped = True  # until restart: publishing them again would flap
            self.ctx.log.warning(
                "plugins.%s: the API server drops consumesCounters (DRAPartitionableDevices is "
                "off); publishing whole GPUs only, without partitions",
                self.ctx.name,
            )
        inventory, published = build_inventory(
            gpus,
            partitions=self.settings.partitions and not self._counters_dropped,
            taints=taints,
            # a composite's pairs consume the GPU's set; whole_device_counters gives it to
            # standalone GPUs too, for a Kueue that charges counters (docs/multi-node.md)
            whole_counters=(self.ctx.shares_driver or self.settings.whole_device_counters)
            and not self._counters_dropped,
        )
        with self._lock:
            self._published = published
        return inventory

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """``/dev/kfd`` and the allocated GPU's or partition's card and render nodes."""
        del held
        with self._lock:
            published = dict(self._published)
        return prepare_devices(published, Path(self.ctx.node.sysfs_root), claim)

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Nothing to undo: prepare changes nothing on the node."""
        del claim_uid, prepared
        return True

    @hookimpl
    def drakit_device_health(self, node: NodeInfo) -> list[DeviceHealth] | None:
        """Every published device, Unhealthy while sysfs reports a problem of its GPU."""
        with self._lock:
            published = dict(self._published)
        if not published:
            return None
        fresh = {g.fn.bdf: g for g in read_amd_gpus(Path(node.sysfs_root))}
        now = datetime.now(UTC)
        out = []
        for name, target in sorted(published.items()):
            gpu = fresh.get(target.gpu.fn.bdf)
            problem = ("gone", "the GPU is gone from sysfs") if gpu is None else problem_of(gpu)
            out.append(
                DeviceHealth(
                    pool=node.name,
                    device=name,
                    health="Unhealthy" if problem else "Healthy",
                    message=problem[1] if problem else "",
                    last_updated=now,
                )
            )
        return out

    @hookimpl
    def drakit_device_classes(self, driver: str) -> list[DeviceClassSpec] | None:
        """The default class; under a shared driver narrowed to GPUs and partitions."""
        return shared_driver_class(
            self.ctx.name,
            driver,
            ("amdgpu", "amdgpu-partition"),
            shares_driver=self.ctx.shares_driver,
        )
