"""drakit backend for NVIDIA GPUs: the hooks, over the NVML seam.

Discovery (:mod:`.discovery`) reads NVML through :mod:`.nvml` (nvidia-ml-py on a node, the
simulated root's fake NVML in tests); :mod:`.devices` turns it into devices with NVIDIA's
attribute names and, for GPUs in MIG mode, partitionable MIG placements; prepare creates MIG
instances (:mod:`.mig`), applies ``GpuConfig`` sharing (:mod:`.config`, :mod:`.prepare`) and
returns the CDI edits (:mod:`.cdi`); health comes from the XID watcher (:mod:`.health`).
``docs/gpu-backends.md`` is the user-facing description.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from drakit.config import PluginSettings, parse_opaque_config
from drakit.context import PluginContext
from drakit.deviceclasses import DeviceClassSpec, shared_driver_class
from drakit.errors import RetryableError
from drakit.hookspecs import hookimpl
from drakit.models import (
    ClaimInfo,
    DeviceHealth,
    DeviceInventory,
    NodeInfo,
    PreparedDevice,
)
from drakit.statefiles import StateDir
from drakit_nvidia_gpu.config import GPU_CONFIG_API_VERSION, GpuConfig
from drakit_nvidia_gpu.devices import Published, build_inventory
from drakit_nvidia_gpu.discovery import NodeGpus, read_gpus
from drakit_nvidia_gpu.driverfiles import LIB_DIRS, DriverFiles, find_driver_files
from drakit_nvidia_gpu.health import XidWatcher, problem_taints
from drakit_nvidia_gpu.nvml import Nvml, NvmlUnavailable, open_nvml
from drakit_nvidia_gpu.prepare import prepare_devices, unprepare_devices
from drakit_nvidia_gpu.settings import NvidiaGpuSettings
from drakit_nvidia_gpu.toolkit import (
    CTK_DIRS,
    ToolkitError,
    ToolkitRun,
    find_ctk,
    find_hook,
    toolkit_driver_files,
)

__all__ = ["NvidiaGpuPlugin", "NvidiaGpuSettings"]


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
        self._driver_files: DriverFiles | None = None
        self._toolkit_error: str | None = None
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

    @hookimpl
    def drakit_discover_devices(self, node: NodeInfo) -> DeviceInventory | None:
        """GPUs (and MIG placements of GPUs in MIG mode) from NVML, placed with sysfs."""
        nvml = self._open()
        if nvml is None:
            return None
        try:
            gpus = read_gpus(nvml, self._last, self.ctx.skipped)
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
            for uuid, why in sorted(watcher.unwatched.items()):
                self.ctx.skipped.skip(
                    "health",
                    uuid,
                    "not-supported"
                    if "NotSupported" in why or "does not report" in why
                    else "nvml-error",
                    f"XID health watching is off for this GPU ({why}); it is published and "
                    "stays Healthy unless it falls off the bus",
                    lasting=True,
                )
        problems = self.watcher.problems() if self.watcher is not None else {}
        if not self._counters_dropped and "consumesCounters" in self.ctx.dropped_fields():
            self._counters_dropped = True  # until restart: publishing them again would flap
            self.ctx.log.warning(
                "plugins.%s: the API server drops consumesCounters (DRAPartitionableDevices is "
                "off); publishing full GPUs only, without MIG partitions",
                self.ctx.name,
            )
        files = self._find_driver_files(node, gpus.driver_version)
        inventory, published = build_inventory(
            gpus,
            Path(node.sysfs_root),
            partitions=self.settings.mig_partitions and not self._counters_dropped,
            taints=problem_taints(problems, self.settings.taint_effect),
            # a composite's pairs consume the GPU's set; whole_device_counters gives it to
            # standalone GPUs too, for a Kueue that charges counters (docs/multi-node.md)
            whole_counters=(self.ctx.shares_driver or self.settings.whole_device_counters)
            and not self._counters_dropped,
        )
        with self._lock:
            self._published = published
            self._last = gpus
            self._driver_files = files
        self.ctx.log.debug("published %d NVIDIA devices", len(inventory.devices))
        return inventory

    def _driver_roots(self, node: NodeInfo) -> tuple[Path, str]:
        """Where this process sees the driver root, and its path on the host."""
        base = Path(node.sysfs_root)  # a simulated root plays the host
        s = self.settings
        seen = base / (s.driver_root_seen or s.driver_root).lstrip("/")
        return seen, str(base / s.driver_root.lstrip("/"))

    def _find_driver_files(self, node: NodeInfo, version: str) -> DriverFiles | None:
        """The driver's files for CDI (``driver_files``); found again when the version changes.

        From ``nvidia-ctk cdi generate`` (:mod:`.toolkit`) with ``toolkit``, and with ``auto``
        and ``required`` when ``nvidia-ctk`` is found; else (or when the toolkit fails under
        ``auto``/``required``) from drakit's own discovery (:mod:`.driverfiles`).
        """
        s = self.settings
        if s.driver_files == "none":
            return None
        old = self._driver_files
        if old is not None and old.version == version:
            return old
        seen, host = self._driver_roots(node)
        if s.driver_files != "own":
            files = self._toolkit_files(node, version, seen, host)
            if files is not None or s.driver_files == "toolkit":
                return files
        return self._own_files(version, seen, host)

    def _toolkit_files(
        self, node: NodeInfo, version: str, seen: Path, host: str
    ) -> DriverFiles | None:
        """The toolkit's files; ``None`` (the reason logged, kept for ``toolkit``) without."""
        s = self.settings
        where = f"plugins.{self.ctx.name}"
        said, self._toolkit_error = self._toolkit_error, None
        if s.cdi_hook == "none":
            return None  # auto/required without hooks: drakit's own layout (toolkit: refused)
        ctk = find_ctk(s.nvidia_ctk, seen)
        hook = find_hook(s.cdi_hook, seen, host)
        why = None
        if ctk is None:
            if s.driver_files != "toolkit":
                return None  # auto/required: no toolkit here, drakit's own discovery
            why = (
                f"{where}.driver_files is toolkit but nvidia-ctk is not found ("
                + (
                    f"nvidia_ctk {s.nvidia_ctk} is not an executable"
                    if s.nvidia_ctk != "auto"
                    else f"not on PATH, nor under {', '.join(CTK_DIRS)} in {seen}"
                )
                + "): install the NVIDIA container toolkit, set nvidia_ctk to its path, or use "
                "driver_files: own"
            )
        elif hook is None:
            why = (
                f"{where}: nvidia-ctk {ctk} is found but nvidia-cdi-hook is not (cdi_hook "
                f"{s.cdi_hook}; looked under {seen}): set cdi_hook to the hook's path on the host"
            )
        else:
            dev_root = Path(node.sysfs_root) / (s.toolkit_dev_root or "").lstrip("/")
            run = ToolkitRun(
                ctk=ctk,
                seen_root=seen,
                host_root=host,
                dev_root=dev_root if s.toolkit_dev_root else seen,
                hook=hook,
                mode=s.toolkit_mode,
                timeout=s.toolkit_timeout,
                setting=where,
            )
            try:
                files = toolkit_driver_files(run, version, self._state())
            except (ToolkitError, RetryableError) as e:
                why = f"{where}: driver files from the toolkit: {e}"
            else:
                self.ctx.log.info(
                    "%s: driver %s: %d files and %d hooks for CDI from %s (%s mode)",
                    where,
                    version,
                    len(files.mounts),
                    len(files.hooks),
                    ctk,
                    s.toolkit_mode,
                )
                return files
        if s.driver_files == "toolkit":
            self._toolkit_error = why
            if why != said:  # tried again every discovery round: logged when it changes
                self.ctx.log.error("%s; GPU claims fail until this is fixed", why)
        else:
            self.ctx.log.warning(
                "%s; using drakit's own discovery for driver %s instead", why, version
            )
        return None

    def _state(self) -> StateDir | None:
        return self.ctx.state if self.ctx.state.path is not None else None

    def _own_files(self, version: str, seen: Path, host: str) -> DriverFiles:
        """The driver's files as drakit's own discovery finds them under the driver root."""
        s = self.settings
        hook = None if s.cdi_hook in ("auto", "none") else s.cdi_hook
        files = find_driver_files(seen, host, version, hook=hook, find_hook=s.cdi_hook == "auto")
        if files.libcuda is None:
            self.ctx.log.warning(
                "plugins.%s: no libcuda.so.%s under driver_root %s (seen at %s; searched %s): "
                "GPU claims get device nodes only, %s",
                self.ctx.name,
                version,
                s.driver_root,
                seen,
                ", ".join(LIB_DIRS),
                "and fail (driver_files: required)"
                if s.driver_files == "required"
                else "so CUDA needs the NVIDIA runtime in legacy mode",
            )
        else:
            self.ctx.log.info(
                "plugins.%s: driver %s: %d files for CDI under %s, found by drakit (%s)",
                self.ctx.name,
                version,
                len(files.mounts),
                host,
                f"hooks: {files.hook}" if files.hook else "no nvidia-cdi-hook: /usr/local/nvidia",
            )
        return files

    # -- claims --------------------------------------------------------------------------------

    @hookimpl
    def drakit_parse_config(
        self, api_version: str, kind: str, parameters: Mapping[str, Any]
    ) -> BaseModel | None:
        """Validate a ``GpuConfig``; errors name the field (``sharing.strategy: ...``)."""
        ours = (GPU_CONFIG_API_VERSION, "GpuConfig")
        return parse_opaque_config(GpuConfig, ours, api_version, kind, parameters)

    @hookimpl
    def drakit_prepare_devices(
        self, claim: ClaimInfo, held: Sequence[PreparedDevice]
    ) -> list[PreparedDevice]:
        """Create MIG instances, apply sharing, and hand out device nodes and UUIDs."""
        with self._lock:
            published = dict(self._published)
            files = self._driver_files
            toolkit_error = self._toolkit_error
        if files is None and toolkit_error is not None:
            raise RetryableError(
                f"claim {claim.namespace}/{claim.name}: {toolkit_error}; will retry"
            )
        root = Path(self.ctx.node.sysfs_root)
        return prepare_devices(
            self.nvml, published, root, self.settings, self.ctx.name, claim, held, files
        )

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> bool:
        """Destroy the claim's MIG instances and undo MPS's compute mode (idempotent)."""
        return unprepare_devices(self.nvml, claim_uid, prepared)

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
