"""Applying a claim's ``GpuConfig`` sharing at prepare: checks, compute mode, MPS edits.

The configuration model is :mod:`.sharing`; this module acts on it: per-claim checks that need
the device (memory limit, MIG), the NVML compute mode (``DEFAULT`` for time-slicing,
``EXCLUSIVE_PROCESS`` for MPS), ``nvidia-smi compute-policy`` for non-default time-slice
intervals, and the MPS client environment and pipe-directory mount.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from drakit.errors import PermanentError, RetryableError
from drakit.models import AllocatedDevice
from drakit_nvidia_gpu.devices import Published
from drakit_nvidia_gpu.nvml import Nvml
from drakit_nvidia_gpu.sharing import INTERVALS, GpuConfig, Sharing

__all__ = [
    "COMPUTEMODE_DEFAULT",
    "COMPUTEMODE_EXCLUSIVE_PROCESS",
    "apply_sharing",
    "claim_sharing",
    "mps_edits",
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
) -> tuple[list[str], list[dict[str, Any]]]:
    """The MPS client environment and the pipe-directory mount for a claim's devices."""
    env = [f"CUDA_MPS_PIPE_DIRECTORY={pipe}"]
    if sharing.mps is not None and sharing.mps.default_active_thread_percentage is not None:
        env.append(
            f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={sharing.mps.default_active_thread_percentage}"
        )
    if sharing.mps is not None and sharing.mps.pinned_mib is not None:
        limit = ",".join(f"{i}={sharing.mps.pinned_mib}M" for i in range(len(uuids)))
        env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limit}")
    mounts = [{"hostPath": pipe, "containerPath": pipe, "options": ["rbind", "rw"]}]
    return env, mounts
