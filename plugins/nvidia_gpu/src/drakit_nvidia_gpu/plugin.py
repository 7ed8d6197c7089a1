"""drakit backend for NVIDIA GPUs: the hooks, over the NVML seam.

Discovery (:mod:`.discovery`) reads NVML through :mod:`.nvml` (nvidia-ml-py on a node, the
simulated root's fake NVML in tests); :mod:`.devices` turns it into devices with NVIDIA's
attribute names and, for GPUs in MIG mode, partitionable MIG placements; prepare creates MIG
instances (:mod:`.mig`), applies ``GpuConfig`` sharing (:mod:`.sharing`, :mod:`.share`) and
returns the CDI edits (:mod:`.cdi`); health comes from the XID watcher (:mod:`.health`).
``docs/gpu-backends.md`` is the user-facing description.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from drakit.config import PluginSettings, validation_errors
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.errors import ConfigInvalid, PermanentError, RetryableError
from drakit.hookspecs import hookimpl
from drakit.models import (
    AllocatedDevice,
    CdiEdits,
    ClaimInfo,
    DeviceHealth,
    DeviceInventory,
    DeviceTaint,
    NodeInfo,
    PreparedDevice,
)
from drakit_nvidia_gpu.cdi import gpu_nodes, visible_env
from drakit_nvidia_gpu.devices import Published, build_inventory
from drakit_nvidia_gpu.discovery import NodeGpus, read_gpus
from drakit_nvidia_gpu.health import GpuProblem, XidWatcher
from drakit_nvidia_gpu.mig import MigInstance, destroy_mig, ensure_mig
from drakit_nvidia_gpu.nvml import Nvml, NvmlUnavailable, open_nvml
from drakit_nvidia_gpu.settings import NvidiaGpuSettings
from drakit_nvidia_gpu.share import COMPUTEMODE_DEFAULT, apply_sharing, claim_sharing, mps_edits
from drakit_nvidia_gpu.sharing import GPU_CONFIG_API_VERSION, GpuConfig

__all__ = ["NvidiaGpuPlugin", "NvidiaGpuSettings"]

TAINT_XID = "gpu.nvidia.drakit.io/xid"
TAINT_LOST = "gpu.nvidia.drakit.io/gpu-lost"


class NvidiaGpuPlugin:
    """The NVIDIA GPU backend; see the module docstring."""

    settings_model: ClassVar[type[PluginSettings]] = NvidiaGpuSettings
    default_driver: ClassVar[str] = "gpu.nvidia.drakit.io"

    def __init__(self, context: PluginContext) -> None:
        self.ctx = context
        self.settings = context.settings_as(NvidiaGpuSettings)
        self.nvml: Nvml | None = None
        self.watcher: XidWatcher | None = None
        self._said_unavailable = False
        self._published: dict[str, Published] = {}
        self._last: NodeGpus | None = None
        self._counters_dropped = False
        self._lock = threading.Lock()

    # -- discovery -----------------------------------------------------------------------------

    def _open(self) -> Nvml | None:
        if self.nvml is not None:
            return self.nvml
        try:
            self.nvml = open_nvml(self.ctx.libraries)
        except NvmlUnavailable as e:
            if not self._said_unavailable:
                self.ctx.log.warning(
                    "plugins.%s: NVML is not available on this node (%s); publishing no NVIDIA "
                    "GPUs",
                    self.ctx.name,
                    e,
                )
                self._said_unavailable = True
            return None
        return self.nvml

    def _taints(self, problems: Mapping[str, GpuProblem]) -> dict[str, tuple[DeviceTaint, ...]]:
        effect = self.settings.taint_effect
        out: dict[str, tuple[DeviceTaint, ...]] = {}
        for uuid, p in problems.items():
            if p.kind == "lost":
                out[uuid] = (DeviceTaint(key=TAINT_LOST, value="true", effect=effect),)
            else:
                out[uuid] = (DeviceTaint(key=TAINT_XID, value=str(p.xid), effect=effect),)
        return out

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """GPUs (and MIG placements of GPUs in MIG mode) from NVML, placed with sysfs."""
        nvml = self._open()
        if nvml is None:
            return None
        try:
            gpus = read_gpus(nvml, self._last)
        except nvml.error as e:
            raise RetryableError(f"plugins.{self.ctx.name}: reading NVML failed: {e}") from e
        if self.settings.health_watch and self.watcher is None and gpus.gpus:
            watcher = XidWatcher(
                nvml,
                ignored=self.settings.ignored_xids,
                clear_after=self.settings.health_clear_after,
            )
            watcher.start([g.uuid for g in gpus.gpus])
            self.watcher = watcher
        problems = self.watcher.problems() if self.watcher is not None else {}
        if not self._counters_dropped and "consumesCounters" in self.ctx.dropped_fields():
            self._counters_dropped = True  # until restart: publishing them again would flap
            self.ctx.log.warning(
                "plugins.%s: the API server drops consumesCounters (DRAPartitionableDevices is "
                "off); publishing full GPUs only, without MIG partitions",
                self.ctx.name,
            )
        inventory, published = build_inventory(
            gpus,
            Path(node.sysfs_root),
            partitions=self.settings.mig_partitions and not self._counters_dropped,
            taints=self._taints(problems),
            whole_counters=self.ctx.shares_driver and not self._counters_dropped,
        )
        with self._lock:
            self._published = published
            self._last = gpus
        self.ctx.log.debug("published %d NVIDIA devices", len(inventory.devices))
        return inventory

    # -- claims --------------------------------------------------------------------------------

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``GpuConfig``; errors name the field (``sharing.strategy: ...``)."""
        if api_version != GPU_CONFIG_API_VERSION or kind != "GpuConfig":
            return None
        try:
            return GpuConfig.model_validate(dict(parameters))
        except ValidationError as e:
            raise ConfigInvalid(validation_errors(e)) from e

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """Create MIG instances, apply sharing, and hand out device nodes and UUIDs."""
        nvml = self.nvml
        if nvml is None:
            raise PermanentError(f"claim {claim.namespace}/{claim.name}: NVML is not available")
        with self._lock:
            published = dict(self._published)
        held_mig = [
            (p.state["mig"]["gpu_uuid"], p.state["mig"]["start"], p.state["mig"]["size"])
            for p in held
            if "mig" in p.state
        ]
        root = Path(self.ctx.node.sysfs_root)
        made: list[tuple[AllocatedDevice, Published, str, MigInstance | None]] = []
        for dev in claim.devices:
            where = f"claim {claim.namespace}/{claim.name} request {dev.request!r} ({dev.device})"
            target = published.get(dev.device)
            if target is None:
                raise PermanentError(
                    f"{where}: {dev.device!r} is not an NVIDIA device on this node "
                    f"(known: {', '.join(sorted(published)) or 'none'})"
                )
            mig = None
            if target.placement is not None:
                mig = ensure_mig(nvml, root, target.gpu, target.placement, held_mig, where)
                held_mig.append((mig.gpu_uuid, mig.start, mig.size))
            made.append((dev, target, mig.uuid if mig else target.gpu.uuid, mig))
        uuids = [u for _, _, u, _ in made]
        out = []
        for dev, target, uuid, mig in made:
            where = f"claim {claim.namespace}/{claim.name} request {dev.request!r} ({dev.device})"
            sharing = claim_sharing(dev)
            env = [visible_env(uuids)]
            mounts: list[dict[str, Any]] = []
            state: dict[str, Any] = {"uuid": uuid}
            if sharing is not None:
                apply_sharing(
                    nvml,
                    target,
                    sharing,
                    where,
                    nvidia_smi=self.settings.nvidia_smi,
                    setting=f"plugins.{self.ctx.name}.nvidia_smi",
                )
                state["sharing"] = sharing.strategy
                if sharing.strategy == "MPS":
                    extra_env, mounts = mps_edits(self.settings.mps_pipe_directory, uuids, sharing)
                    env += extra_env
            if mig is not None:
                state.update(mig.state())
            out.append(
                PreparedDevice(
                    request=dev.request,
                    pool=dev.pool,
                    device=dev.device,
                    edits=CdiEdits(
                        env=tuple(env),
                        device_nodes=gpu_nodes(target.gpu.minor, mig.caps if mig else ()),
                        mounts=tuple(mounts),
                    ),
                    state=state,
                )
            )
        return out

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Destroy the claim's MIG instances and undo MPS's compute mode (idempotent)."""
        nvml = self.nvml
        if nvml is None:
            if any("mig" in p.state or "sharing" in p.state for p in prepared):
                raise RetryableError(f"claim {claim_uid}: NVML is not available to undo prepare")
            return True
        for p in prepared:
            where = f"claim {claim_uid} device {p.device}"
            if "mig" in p.state:
                destroy_mig(nvml, p.state, where)
            elif p.state.get("sharing") == "MPS":
                try:
                    nvml.set_compute_mode(nvml.handle(p.state["uuid"]), COMPUTEMODE_DEFAULT)
                except nvml.error as e:
                    raise RetryableError(
                        f"{where}: NVML could not reset the compute mode: {e}"
                    ) from e
        return True

    # -- health --------------------------------------------------------------------------------

    @hookimpl
    def drakit_device_health(self, node: NodeInfo) -> list[DeviceHealth] | None:
        """Every published device: Unhealthy (with the XID) while its GPU has a problem."""
        if self.watcher is None:
            return None
        problems = self.watcher.problems()
        with self._lock:
            published = dict(self._published)
        now = datetime.now(UTC)
        out = []
        for name, target in sorted(published.items()):
            p = problems.get(target.gpu.uuid)
            out.append(
                DeviceHealth(
                    pool=node.name,
                    device=name,
                    health="Unhealthy" if p else "Healthy",
                    message=p.message if p else "",
                    last_updated=now,
                )
            )
        return out

    @hookimpl
    def drakit_device_classes(self, driver: str) -> list[DeviceClassSpec] | None:
        """The default class; under a shared driver narrowed to GPUs and MIG devices."""
        return shared_driver_class(
            self.ctx.name, driver, ("gpu", "mig"), shares_driver=self.ctx.shares_driver
        )
