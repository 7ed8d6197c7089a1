"""Creating and destroying MIG instances for prepared claims, idempotent and crash-safe.

Prepare creates one GPU instance at the allocated placement and one compute instance over
all of it; unprepare destroys both. The hardware is the source of truth, so every step can
be repeated after a crash at any point:

* a GPU instance of the same profile at the same placement already exists: it is adopted
  (a previous prepare of this claim got that far before the process died);
* a GPU instance overlaps the placement and no other prepared claim holds it: it is a
  leftover of a claim that was never recorded, and it is destroyed first;
* an overlapping instance another prepared claim holds: the claim fails (the scheduler's
  counters make this impossible unless someone created instances behind drakit's back);
* destroying what is already gone is success.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drakit.errors import PermanentError, RetryableError
from drakit_nvidia_gpu.cdi import mig_cap_minor
from drakit_nvidia_gpu.discovery import GpuInfo, MigPlacement
from drakit_nvidia_gpu.nvml import Nvml

__all__ = ["MigInstance", "destroy_mig", "ensure_mig"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigInstance:
    """A MIG device that exists: what the claim's state records and the CDI edits need."""

    gpu_uuid: str
    gpu_minor: int
    profile_id: int
    start: int
    size: int
    gi: int
    ci: int
    uuid: str
    caps: tuple[int, int]

    def state(self) -> dict[str, Any]:
        """The checkpointed form."""
        return {
            "mig": {
                "gpu_uuid": self.gpu_uuid,
                "gpu_minor": self.gpu_minor,
                "profile_id": self.profile_id,
                "start": self.start,
                "size": self.size,
                "gi": self.gi,
                "ci": self.ci,
                "uuid": self.uuid,
                "caps": list(self.caps),
            }
        }


def _overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


def ensure_mig(
    nvml: Nvml,
    root: Path,
    gpu: GpuInfo,
    placement: MigPlacement,
    held: Iterable[tuple[str, int, int]],
    where: str,
) -> MigInstance:
    """The MIG device at ``placement`` of ``gpu``, created unless it already exists.

    Args:
        nvml: the seam.
        root: the sysfs root (MIG capability files live under its ``proc``).
        gpu: the parent GPU.
        placement: the profile and start the scheduler allocated.
        held: ``(gpu_uuid, start, size)`` of MIG devices other prepared claims hold.
        where: names the claim and device in errors.

    Raises:
        PermanentError: another claim holds an overlapping instance.
        RetryableError: NVML failed (the kubelet retries).
    """
    p = placement.profile
    taken = [(s, z) for u, s, z in held if u == gpu.uuid]
    try:
        h = nvml.handle(gpu.uuid)
        gi_handle: Any = None
        for gi, info in nvml.gpu_instances(h):
            if info.profile_id == p.id and info.start == placement.start:
                gi_handle = gi
                logger.info("%s: adopting existing GPU instance %d", where, info.id)
                continue
            if not _overlaps(info.start, info.size, placement.start, p.placement_size):
                continue
            if any(_overlaps(info.start, info.size, s, z) for s, z in taken):
                raise PermanentError(
                    f"{where}: GPU instance {info.id} on {gpu.uuid} (placement {info.start}+"
                    f"{info.size}) is held by another claim and overlaps the allocated "
                    f"placement {placement.start}+{p.placement_size}"
                )
            logger.warning(
                "%s: destroying stale GPU instance %d on %s (placement %d+%d, held by no claim)",
                where,
                info.id,
                gpu.uuid,
                info.start,
                info.size,
            )
            nvml.destroy(gi)
        if gi_handle is None:
            gi_handle = nvml.create_gpu_instance(h, p.id, placement.start, p.placement_size)
        gi_id = int(nvml.lib.nvmlGpuInstanceGetInfo(gi_handle).id)
        cis = nvml.compute_instances(gi_handle)
        ci_id = cis[0][1] if cis else nvml.create_compute_instance(gi_handle, p.slices)[1]
        mig_uuid = nvml.mig_device_uuid(h, gi_id, ci_id)
    except nvml.error as e:
        raise RetryableError(f"{where}: NVML could not create MIG {p.name}: {e}") from e
    if mig_uuid is None:
        raise RetryableError(f"{where}: NVML lists no MIG device for GPU instance {gi_id}")
    caps = (
        mig_cap_minor(root, gpu.minor, gi_id),
        mig_cap_minor(root, gpu.minor, gi_id, ci_id),
    )
    return MigInstance(
        gpu_uuid=gpu.uuid,
        gpu_minor=gpu.minor,
        profile_id=p.id,
        start=placement.start,
        size=p.placement_size,
        gi=gi_id,
        ci=ci_id,
        uuid=mig_uuid,
        caps=caps,
    )


def destroy_mig(nvml: Nvml, state: dict[str, Any], where: str) -> None:
    """Destroy the MIG device a prepare recorded; already gone is fine.

    Raises:
        RetryableError: NVML failed (the kubelet retries the unprepare).
    """
    mig = state["mig"]
    try:
        h = nvml.handle(mig["gpu_uuid"])
        for gi, info in nvml.gpu_instances(h):
            if info.profile_id == mig["profile_id"] and info.start == mig["start"]:
                nvml.destroy(gi)
                logger.info("%s: destroyed GPU instance %d on %s", where, info.id, mig["gpu_uuid"])
    except nvml.error as e:
        raise RetryableError(f"{where}: NVML could not destroy the MIG device: {e}") from e
