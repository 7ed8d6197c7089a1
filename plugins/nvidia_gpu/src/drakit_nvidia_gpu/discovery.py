"""What NVML reports about the node's GPUs, read through the seam into plain values.

:func:`read_gpus` asks NVML (real or fake, :mod:`drakit_nvidia_gpu.nvml`) for every GPU's
identity, memory, MIG mode and, for GPUs in MIG mode, every MIG profile with its possible
placements. Everything NVML does not own (NUMA node, PCIe root) comes from sysfs in
:mod:`drakit_nvidia_gpu.devices`, as NVIDIA's own driver does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from drakit.context import SkippedItems
from drakit_nvidia_gpu.nvml import Nvml

__all__ = ["GpuInfo", "MigPlacement", "MigProfileInfo", "NodeGpus", "read_gpus"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigProfileInfo:
    """One GPU instance profile of a GPU (``nvmlDeviceGetGpuInstanceProfileInfo``)."""

    id: int
    name: str
    slices: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_bytes: int
    placement_size: int
    placement_starts: tuple[int, ...]

    @property
    def short(self) -> str:
        """The name in lower-case letters and digits only, for device names (``1g10gb``).

        NVIDIA's device names drop the dots; a ``+me`` profile (media extensions, ``1g.10gb+me``)
        loses its ``+`` too (``1g10gbme``), since a device name is a DNS label.
        """
        return "".join(c for c in self.name.lower() if c.isascii() and c.isalnum())


@dataclass(frozen=True)
class MigPlacement:
    """One MIG placement: a profile at a start position of a GPU."""

    profile: MigProfileInfo
    start: int


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it."""

    uuid: str
    minor: int
    name: str
    brand: str
    architecture: str
    compute_capability: tuple[int, int]
    pci_bus_id: str
    memory_bytes: int | None
    mig_enabled: bool | None
    mig_profiles: tuple[MigProfileInfo, ...] = ()

    @property
    def device_name(self) -> str:
        """The published name, as NVIDIA's driver names full GPUs: ``gpu-<minor>``."""
        return f"gpu-{self.minor}"

    def placements(self) -> list[MigPlacement]:
        """Every MIG placement of every profile, by profile then start."""
        return [MigPlacement(p, s) for p in self.mig_profiles for s in p.placement_starts]


@dataclass(frozen=True)
class NodeGpus:
    """Everything NVML said in one discovery round.

    Attributes:
        gpus: the GPUs, by NVML index (a GPU lost before it was ever read is left out).
        indices: the NVML index of each of ``gpus``.
    """

    driver_version: str
    cuda_driver_version: int
    gpus: tuple[GpuInfo, ...]
    indices: tuple[int, ...] = ()


def _profile_name(raw: bytes | str, slices: int, memory_mib: int) -> str:
    text = raw.decode() if isinstance(raw, bytes) else raw
    text = text.removeprefix("MIG ").strip()
    return text or f"{slices}g.{round(memory_mib / 1024)}gb"


def read_gpus(
    nvml: Nvml, previous: NodeGpus | None = None, skipped: SkippedItems | None = None
) -> NodeGpus:
    """Ask NVML for every GPU (MIG profiles only for GPUs whose MIG mode is on).

    A GPU that has fallen off the bus (``GpuIsLost``, from its handle or any later query)
    keeps what the previous round read at its NVML index, so it stays published (and tainted)
    instead of vanishing; with nothing read at that index before it is left out. A GPU for
    which any other NVML call fails is treated the same way and named in a warning (the call
    and the error): one GPU never stops the others from being published. Each such GPU is
    also named in ``skipped`` (``gpu<index>``, reason ``nvml-error`` or ``unusable-answer``).
    """

    def skip(i: int, reason: str, why: str) -> None:
        if skipped is not None:
            fate = "its last reading is kept" if i in before else "it is not published"
            skipped.skip("device", f"gpu{i}", reason, f"NVML GPU {i}: {why}; {fate}")

    before = dict(zip(previous.indices, previous.gpus, strict=True)) if previous else {}
    gpus: list[GpuInfo] = []
    indices: list[int] = []
    for i, h in enumerate(nvml.handles()):
        info = None
        refused = getattr(nvml, "handle_errors", {}).get(i)
        if h is None and refused is not None:
            skip(i, "nvml-error", f"no handle ({refused})")
        if h is not None:
            try:
                info = _read_gpu(nvml, h)
            except nvml.gpu_lost:
                info = None
            except nvml.error as e:
                log.warning(
                    "NVML GPU %d: %r while reading it; %s",
                    i,
                    e,
                    "its last reading is kept" if i in before else "it is not published",
                )
                skip(i, "nvml-error", f"{e!r} while reading it")
                info = None
            except (ValueError, TypeError) as e:  # an answer drakit's models refuse
                log.warning("NVML GPU %d: unusable answer (%s); it is skipped", i, e)
                skip(i, "unusable-answer", f"an answer drakit refuses ({str(e)[:300]})")
                info = None
        if info is None:
            info = before.get(i)
            if info is None:
                continue
        gpus.append(info)
        indices.append(i)
    return NodeGpus(
        driver_version=nvml.driver_version(),
        cuda_driver_version=nvml.cuda_driver_version(),
        gpus=tuple(gpus),
        indices=tuple(indices),
    )


def _read_gpu(nvml: Nvml, h: object) -> GpuInfo:
    mig = nvml.mig_enabled(h)
    profiles: list[MigProfileInfo] = []
    if mig:
        for info, placements in nvml.mig_profiles(h):
            if not placements:
                continue
            slices = int(info.sliceCount)
            memory_mib = int(info.memorySizeMB)
            profiles.append(
                MigProfileInfo(
                    id=int(info.id),
                    name=_profile_name(getattr(info, "name", b""), slices, memory_mib),
                    slices=slices,
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                    memory_bytes=memory_mib * 1024 * 1024,
                    placement_size=placements[0][1],
                    placement_starts=tuple(start for start, _ in placements),
                )
            )
    return GpuInfo(
        uuid=nvml.uuid(h),
        minor=nvml.minor(h),
        name=nvml.name(h),
        brand=nvml.brand(h),
        architecture=nvml.architecture(h),
        compute_capability=nvml.compute_capability(h),
        pci_bus_id=nvml.pci_bus_id(h),
        memory_bytes=nvml.memory(h),
        mig_enabled=mig,
        mig_profiles=tuple(profiles),
    )
