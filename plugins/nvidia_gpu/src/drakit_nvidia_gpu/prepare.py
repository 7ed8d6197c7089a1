"""The NVIDIA backend's prepare: MIG instances, ``GpuConfig`` sharing, the CDI edits; unprepare.

:func:`prepare_devices` creates a claim's MIG instances (:mod:`.mig`), applies its sharing and
returns the device nodes and UUIDs (:mod:`.cdi`); :func:`unprepare_devices` undoes both.

Sharing: the configuration model is :mod:`.config`; this module acts on it: per-claim checks
that need the device (memory limit, MIG), the NVML compute mode (``DEFAULT`` for time-slicing,
``EXCLUSIVE_PROCESS`` for MPS), ``nvidia-smi compute-policy`` for non-default time-slice
intervals, and the MPS client environment and pipe-directory mount.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from drakit.errors import PermanentError, RetryableError
from drakit.models import AllocatedDevice, CdiEdits, CdiMount, ClaimInfo, PreparedDevice
from drakit.preparekit import prepared_device, published_device
from drakit_nvidia_gpu.cdi import gpu_nodes, visible_env
from drakit_nvidia_gpu.config import INTERVALS, GpuConfig, Sharing
from drakit_nvidia_gpu.devices import Published
from drakit_nvidia_gpu.driverfiles import DriverFiles
from drakit_nvidia_gpu.mig import MigInstance, destroy_mig, ensure_mig
from drakit_nvidia_gpu.nvml import Nvml
from drakit_nvidia_gpu.settings import NvidiaGpuSettings

__all__ = [
    "COMPUTEMODE_DEFAULT",
    "COMPUTEMODE_EXCLUSIVE_PROCESS",
    "apply_sharing",
    "claim_sharing",
    "mps_edits",
    "prepare_devices",
    "unprepare_devices",
]

COMPUTEMODE_DEFAULT = 0
COMPUTEMODE_EXCLUSIVE_PROCESS = 3


def claim_sharing(dev: AllocatedDevice) -> Sharing | None:
    """The sharing of the device's last ``GpuConfig`` that sets one (class first, then claim)."""
    sharing = None
    for cfg in dev.config:
        if isinstance(cfg, GpuConfig) and cfg.sharing is not None:
            sharing = cfg.sharing
    return sharing


def apply_sharing(
    nvml: Nvml, target: Published, sharing: Sharing, where: str, *, nvidia_smi: str, setting: str
) -> None:
    """Check ``sharing`` against the device and set the GPU up for it.

    Raises:
        PermanentError: this claim's sharing cannot work on this device (the message names the
            ``GpuConfig`` field).
        RetryableError: NVML or nvidia-smi failed.
    """
    if sharing.strategy == "TimeSlicing" and target.placement is not None:
        raise PermanentError(
            f"{where}: GpuConfig sharing.strategy TimeSlicing has no effect on a MIG device; "
            "use MPS or no sharing"
        )
    if sharing.strategy == "MPS" and sharing.mps is not None:
        limit = sharing.mps.pinned_mib
        memory = (
            target.placement.profile.memory_bytes
            if target.placement is not None
            else target.gpu.memory_bytes
        )
        if limit is not None and memory is not None and limit * 2**20 > memory:
            raise PermanentError(
                f"{where}: GpuConfig sharing.mpsConfig.defaultPinnedDeviceMemoryLimit "
                f"{sharing.mps.default_pinned_device_memory_limit} is more than the device's "
                f"{memory // 2**20}Mi of memory"
            )
    if target.placement is not None:
        return  # MPS on a MIG device: the compute mode belongs to the parent GPU
    uuid = target.gpu.uuid
    mode = COMPUTEMODE_EXCLUSIVE_PROCESS if sharing.strategy == "MPS" else COMPUTEMODE_DEFAULT
    try:
        h = nvml.handle(uuid)
        if nvml.compute_mode(h) != mode:
            nvml.set_compute_mode(h, mode)
    except nvml.error as e:
        raise RetryableError(f"{where}: NVML could not set the compute mode: {e}") from e
    interval = sharing.time_slicing.interval if sharing.time_slicing else "Default"
    if sharing.strategy == "TimeSlicing" and interval != "Default":
        _set_timeslice(uuid, interval, where, nvidia_smi, setting)


def _set_timeslice(uuid: str, interval: str, where: str, nvidia_smi: str, setting: str) -> None:
    smi = shutil.which(nvidia_smi)
    if smi is None:
        raise PermanentError(
            f"{where}: GpuConfig sharing.timeSlicingConfig.interval {interval} needs "
            f"nvidia-smi, and {setting} ({nvidia_smi!r}) is not found; use interval Default or "
            "point nvidia_smi at the driver's nvidia-smi"
        )
    argv = [smi, "compute-policy", "-i", uuid, "--set-timeslice", str(INTERVALS[interval])]
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        raise RetryableError(f"{where}: {' '.join(argv)} failed: {e}") from e


def mps_edits(
    pipe: str, uuids: Sequence[str], sharing: Sharing
) -> tuple[list[str], list[CdiMount]]:
    """The MPS client environment and the pipe-directory mount for a claim's devices."""
    env = [f"CUDA_MPS_PIPE_DIRECTORY={pipe}"]
    if sharing.mps is not None and sharing.mps.default_active_thread_percentage is not None:
        env.append(
            f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={sharing.mps.default_active_thread_percentage}"
        )
    if sharing.mps is not None and sharing.mps.pinned_mib is not None:
        limit = ",".join(f"{i}={sharing.mps.pinned_mib}M" for i in range(len(uuids)))
        env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limit}")
    mounts = [CdiMount(host_path=pipe, container_path=pipe, options=("rbind", "rw"))]
    return env, mounts


def prepare_devices(
    nvml: Nvml | None,
    published: Mapping[str, Published],
    root: Path,
    settings: NvidiaGpuSettings,
    name: str,
    claim: ClaimInfo,
    held: Sequence[PreparedDevice],
    driver: DriverFiles | None = None,
) -> list[PreparedDevice]:
    """Create MIG instances, apply sharing, and hand out device nodes, UUIDs and driver files.

    ``published`` is the last discovery round's device name -> GPU (or MIG placement); ``name``
    is the plugin's name in the settings (``plugins.<name>``); ``driver`` the driver's files
    every device's edits carry (:mod:`.driverfiles` or :mod:`.toolkit`; ``None``:
    ``driver_files: none``); where they came from is kept in each device's state
    (``driver_files: "toolkit 580.126.20"``).

    Raises:
        RetryableError: ``driver_files: required`` and the driver's libraries were not found.
    """
    if nvml is None:
        raise PermanentError(f"claim {claim.namespace}/{claim.name}: NVML is not available")
    if settings.driver_files == "required" and (driver is None or driver.libcuda is None):
        raise RetryableError(
            f"claim {claim.namespace}/{claim.name}: plugins.{name}.driver_files is required "
            f"but no libcuda.so.<driver version> was found under driver_root "
            f"{settings.driver_root}: set driver_root to the directory the driver is installed "
            "under, or use driver_files: none with the NVIDIA runtime in legacy mode; will retry"
        )
    driver_mounts = driver.mounts if driver is not None else ()
    driver_hooks = driver.hooks if driver is not None else ()
    driver_env = driver.env if driver is not None else ()
    held_mig = [
        (p.state["mig"]["gpu_uuid"], p.state["mig"]["start"], p.state["mig"]["size"])
        for p in held
        if "mig" in p.state
    ]
    made: list[tuple[AllocatedDevice, Published, str, MigInstance | None]] = []
    for dev in claim.devices:
        where = f"claim {claim.namespace}/{claim.name} request {dev.request!r} ({dev.device})"
        target = published_device(
            published, dev.device, f"{where}: {dev.device!r} is not an NVIDIA device on this node"
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
        env = [visible_env(uuids), *driver_env]
        mounts: list[CdiMount] = []
        state: dict[str, Any] = {"uuid": uuid}
        if driver is not None and driver.libcuda is not None:
            state["driver_files"] = f"{driver.source} {driver.version}"
        if sharing is not None:
            apply_sharing(
                nvml,
                target,
                sharing,
                where,
                nvidia_smi=settings.nvidia_smi,
                setting=f"plugins.{name}.nvidia_smi",
            )
            state["sharing"] = sharing.strategy
            if sharing.strategy == "MPS":
                extra_env, mounts = mps_edits(settings.mps_pipe_directory, uuids, sharing)
                env += extra_env
        if mig is not None:
            state.update(mig.state())
        out.append(
            prepared_device(
                dev,
                edits=CdiEdits(
                    env=tuple(env),
                    device_nodes=gpu_nodes(target.gpu.minor, mig.caps if mig else ()),
                    mounts=(*mounts, *driver_mounts),
                    hooks=driver_hooks,
                ),
                state=state,
            )
        )
    return out


def unprepare_devices(
    nvml: Nvml | None, claim_uid: str, prepared: Sequence[PreparedDevice]
) -> bool:
    """Destroy the claim's MIG instances and undo MPS's compute mode (idempotent)."""
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
                raise RetryableError(f"{where}: NVML could not reset the compute mode: {e}") from e
    return True
