"""The fake NVML seam: a JSON description of NVIDIA GPUs that a simulated root carries.

Real NVML cannot be loaded without a driver, so the simulator writes what NVML would answer to
``<root>/drakit-sim/nvml.json`` and the NVIDIA backend's discovery seam reads it instead of
calling ``pynvml``. Everything NVML does *not* own (NUMA node, pcieRoot, PCI ids) stays in the
simulated sysfs, exactly as on a real node. The format is documented in
``docs/simulated-hardware.md`` ("The fake NVML contract").
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from drakit.sim.devnodes import make_device_node, remove_device_node

if TYPE_CHECKING:
    from drakit.sim import MachineSpec

__all__ = [
    "EVENTS_PATH",
    "FAULT_CALLS",
    "MEMORY_SLICES",
    "NVML_DESCRIPTION_PATH",
    "STATE_PATH",
    "FakeNvml",
    "MigProfile",
    "NvmlDescription",
    "NvmlGpu",
    "gpu_uuid",
    "hopper_mig_profiles",
    "inject_gpu_lost",
    "inject_nvml_fault",
    "inject_xid",
    "load_nvml_description",
    "mig_device_uuid",
    "mig_instances",
    "recover_gpu",
    "simulated_libraries",
    "write_driver_files",
]

NVML_DESCRIPTION_PATH = Path("drakit-sim") / "nvml.json"
"""Where the description lives, relative to the simulated root."""

_UUID_NAMESPACE = uuid.UUID("6f1c4f7e-3b5d-4f6a-9a52-6472616b6974")
_BDF = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"


def gpu_uuid(seed: str) -> str:
    """A deterministic NVML-style GPU UUID (``GPU-xxxxxxxx-xxxx-...``) derived from ``seed``."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, seed)}"


class MigProfile(BaseModel):
    """One GPU instance profile as NVML reports it for a GPU.

    Attributes:
        profile: the ``NVML_GPU_INSTANCE_PROFILE_*`` index asked for (``0`` = 1 slice).
        id: ``.id`` of the profile info (what create calls take).
        name: the profile's name as ``nvidia-smi mig -lgip`` shows it (``1g.10gb``).
        slice_count: compute slices (``.sliceCount``); also the compute instance profile.
        instance_count: ``.instanceCount``.
        multiprocessors: ``.multiprocessorCount``.
        copy_engines: ``.copyEngineCount``.
        decoders: ``.decoderCount``.
        encoders: ``.encoderCount``.
        jpeg_engines: ``.jpegCount``.
        ofa_engines: ``.ofaCount``.
        memory_mib: ``.memorySizeMB``.
        placement_starts: ``.start`` of every possible placement.
        placement_size: ``.size`` of every placement (in memory slices).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: int = Field(ge=0)
    id: int = Field(ge=0)
    name: str
    slice_count: int = Field(gt=0)
    instance_count: int = Field(gt=0)
    multiprocessors: int = Field(gt=0)
    copy_engines: int = Field(ge=0)
    decoders: int = Field(ge=0)
    encoders: int = Field(ge=0)
    jpeg_engines: int = Field(ge=0)
    ofa_engines: int = Field(ge=0)
    memory_mib: int = Field(gt=0)
    placement_starts: tuple[int, ...]
    placement_size: int = Field(gt=0)


class NvmlGpu(BaseModel):
    """What NVML reports for one GPU.

    Attributes:
        index: ``nvmlDeviceGetIndex`` (enumeration order, by PCI bus id).
        minor_number: ``nvmlDeviceGetMinorNumber`` (``/dev/nvidia<minor>``).
        uuid: ``nvmlDeviceGetUUID``.
        name: ``nvmlDeviceGetName`` (e.g. ``NVIDIA H100 80GB HBM3``).
        brand: brand as go-nvlib names it (``Nvidia``, ``Tesla``...).
        architecture: ``Hopper``, ``Blackwell``... (go-nvlib strings).
        cuda_compute_capability: ``nvmlDeviceGetCudaComputeCapability`` as ``[major, minor]``.
        pci_bus_id: sysfs spelling ``0000:1b:00.0`` (NVML's ``00000000:1B:00.0`` is
            :attr:`nvml_bus_id`).
        memory_total_bytes: ``nvmlDeviceGetMemoryInfo(h).total``.
        serial: ``nvmlDeviceGetSerial``.
        mig_capable: whether ``nvmlDeviceGetMigMode`` is supported.
        mig_enabled: current MIG mode.
        module_id: ``nvmlDeviceGetModuleId`` (1-based position on the baseboard).
        mig_profiles: what ``nvmlDeviceGetGpuInstanceProfileInfo`` and
            ``nvmlDeviceGetGpuInstancePossiblePlacements`` answer (empty: no MIG profiles).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    minor_number: int = Field(ge=0)
    uuid: str = Field(pattern=r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    name: str
    brand: str
    architecture: str
    cuda_compute_capability: tuple[int, int]
    pci_bus_id: str = Field(pattern=_BDF)
    memory_total_bytes: int = Field(gt=0)
    serial: str
    mig_capable: bool
    mig_enabled: bool = False
    module_id: int = Field(ge=0)
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def nvml_bus_id(self) -> str:
        """The bus id as NVML spells it: 8-digit domain, uppercase hex (``00000000:1B:00.0``)."""
        return f"0000{self.pci_bus_id}".upper()


class NvmlDescription(BaseModel):
    """The whole ``nvml.json`` file.

    Attributes:
        kind: always ``NvmlDescription``.
        version: format version; bumped on incompatible change.
        driver_version: ``nvmlSystemGetDriverVersion`` (``580.126.20``).
        cuda_driver_version: ``nvmlSystemGetCudaDriverVersion`` as NVML's integer (13000 = 13.0).
        devices: the GPUs, ordered by index.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["NvmlDescription"] = "NvmlDescription"
    version: Literal[1] = 1
    driver_version: str
    cuda_driver_version: int
    devices: tuple[NvmlGpu, ...]

    def to_json(self) -> str:
        """The file's exact text (stable key order, two-space indent, trailing newline)."""
        return self.model_dump_json(indent=2) + "\n"

    def write(self, spec: MachineSpec, root: Path) -> None:
        """Write ``<root>/drakit-sim/nvml.json`` (a :class:`drakit.sim.SimPart` of the spec).

        And the device nodes the driver makes: ``/dev/nvidia<minor>`` of each GPU and the
        control nodes (stand-ins: :mod:`drakit.sim.devnodes`).
        """
        path = root / NVML_DESCRIPTION_PATH
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, self.to_json().encode())
        finally:
            os.close(fd)
        for gpu in self.devices:
            make_device_node(root, f"/dev/nvidia{gpu.minor_number}")
        for node in CONTROL_NODES if self.devices else ():
            make_device_node(root, node, control=True)
        if self.devices:
            write_driver_files(root, self.driver_version)


DRIVER_LIBRARIES: Final = (
    ("libcuda", ("libcuda.so.1", "libcuda.so")),
    ("libnvidia-ml", ("libnvidia-ml.so.1",)),
    ("libnvidia-ptxjitcompiler", ("libnvidia-ptxjitcompiler.so.1",)),
    ("libnvidia-nvvm", ("libnvidia-nvvm.so.4",)),
    ("libcudadebugger", ("libcudadebugger.so.1",)),
    ("libnvidia-gpucomp", ()),
)
"""The simulated driver's libraries (``<name>.so.<version>``) and the links ldconfig makes."""
DRIVER_BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
SIM_LIB_DIR: Final = "usr/lib/x86_64-linux-gnu"


def write_driver_files(root: Path, version: str) -> None:
    """The driver's user space under the simulated root, as a Debian-style install lays it out.

    Stand-ins with the real names (the content says what they are; nothing runs them):
    ``usr/lib/x86_64-linux-gnu/<lib>.so.<version>`` with the ``.so.1``-style links
    (``libcuda.so.1 -> libcuda.so.<version>``, ``libcuda.so -> libcuda.so.1``), the binaries
    in ``usr/bin``, the ``nvidia-persistenced`` socket (a regular file: a bind mount of it
    works the same) and the GSP firmware. ``nvidia-cdi-hook`` is not there (the layout without
    hooks); a test that wants it adds ``usr/bin/nvidia-cdi-hook``.
    """
    lib = root / SIM_LIB_DIR
    lib.mkdir(parents=True, exist_ok=True)
    for name, links in DRIVER_LIBRARIES:
        real = f"{name}.so.{version}"
        (lib / real).write_text(f"simulated {real}\n")
        target = real
        for link in links:
            (lib / link).symlink_to(target)
            target = link
    bindir = root / "usr" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    for name in DRIVER_BINARIES:
        path = bindir / name
        path.write_text(f"#!/bin/sh\necho 'simulated {name}: not a real driver' >&2\nexit 1\n")
        path.chmod(0o755)
    sock = root / "run" / "nvidia-persistenced" / "socket"
    sock.parent.mkdir(parents=True, exist_ok=True)
    sock.write_text("")
    firmware = root / "lib" / "firmware" / "nvidia" / version
    firmware.mkdir(parents=True, exist_ok=True)
    for blob in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (firmware / blob).write_text(f"simulated {blob}\n")


def load_nvml_description(root: Path) -> NvmlDescription:
    """Read and validate ``<root>/drakit-sim/nvml.json``.

    Args:
        root: the simulated root (the directory holding ``sys/`` and ``proc/``).

    Raises:
        FileNotFoundError: the root has no NVML description (no NVIDIA GPUs simulated).
        pydantic.ValidationError: the file does not follow the contract.
    """
    text = (root / NVML_DESCRIPTION_PATH).read_text(encoding="utf-8")
    return NvmlDescription.model_validate_json(text)


# -- MIG profile tables ------------------------------------------------------------------------

# (NVML profile index, profile info id, compute slices, instances, SMs, copy engines, decoders,
#  jpeg, ofa, memory slices per placement, placement starts) for Hopper (H100/H200). The ids are
# those ``nvidia-smi mig -lgip`` lists on an H100; engine counts follow NVIDIA's MIG user guide.
_HOPPER_PROFILES: tuple[
    tuple[int, int, int, int, int, int, int, int, int, int, tuple[int, ...]], ...
] = (
    (0, 19, 1, 7, 16, 1, 1, 1, 0, 1, (0, 1, 2, 3, 4, 5, 6)),
    (9, 15, 1, 4, 16, 1, 1, 1, 0, 2, (0, 2, 4, 6)),
    (1, 14, 2, 3, 32, 2, 2, 2, 0, 2, (0, 2, 4)),
    (2, 9, 3, 2, 60, 3, 3, 3, 0, 4, (0, 4)),
    (3, 5, 4, 1, 64, 4, 4, 4, 0, 4, (0,)),
    (4, 0, 7, 1, 132, 8, 7, 7, 1, 8, (0,)),
    # 1g.10gb+me (NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1): one slice with a JPEG decoder and
    # the GPU's one OFA, so one instance at a time
    (7, 20, 1, 1, 16, 1, 1, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
)
_MEDIA_EXTENSIONS = 7
"""The profile index whose name carries ``+me``."""
MEMORY_SLICES = 8
"""Memory slices of a Hopper GPU (what placements are counted in)."""


def hopper_mig_profiles(memory_mib: int, marketed_gb: int) -> tuple[MigProfile, ...]:
    """The MIG profiles of a Hopper GPU with ``memory_mib`` of memory sold as ``marketed_gb``.

    Names follow NVIDIA's ``<slices>g.<GB>gb`` (``1g.10gb`` ... ``7g.80gb`` on an H100 80GB,
    ``1g.18gb`` ... ``7g.141gb`` on an H200); memory is the placement's share of the whole.
    """
    per_slice = memory_mib // MEMORY_SLICES
    out = []
    for profile, pid, slices, count, sms, ce, dec, jpg, ofa, size, starts in _HOPPER_PROFILES:
        gb = int(marketed_gb * size / MEMORY_SLICES + 0.5)
        out.append(
            MigProfile(
                profile=profile,
                id=pid,
                name=f"{slices}g.{gb}gb" + ("+me" if profile == _MEDIA_EXTENSIONS else ""),
                slice_count=slices,
                instance_count=count,
                multiprocessors=sms,
                copy_engines=ce,
                decoders=dec,
                encoders=0,
                jpeg_engines=jpg,
                ofa_engines=ofa,
                memory_mib=per_slice * size,
                placement_starts=starts,
                placement_size=size,
            )
        )
    return tuple(out)


# -- the fake NVML library ---------------------------------------------------------------------

STATE_PATH = Path("drakit-sim") / "nvml-state.json"
"""What the simulated GPUs hold now (MIG mode and instances, compute modes, lost GPUs)."""
EVENTS_PATH = Path("drakit-sim") / "nvml-events.jsonl"
"""Events waiting for ``nvmlEventSetWait`` (one JSON object a line), appended by tests."""
_LOCK_PATH = Path("drakit-sim") / "nvml.lock"
_CAPS = Path("proc") / "driver" / "nvidia" / "capabilities"
_ALL_INSTANCES = 0xFFFFFFFF
_MAX_MIG_DEVICES = 7
_CAP_MINOR_BASE = 3
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
"""The driver's control nodes, made with the GPUs' own ``/dev/nvidia<minor>`` nodes."""

_BRANDS = {"Unknown": 0, "Quadro": 1, "Tesla": 2, "NVS": 3, "Grid": 4, "GeForce": 5, "Nvidia": 14}
_ARCHITECTURES = {
    "Kepler": 2,
    "Maxwell": 3,
    "Pascal": 4,
    "Volta": 5,
    "Turing": 6,
    "Ampere": 7,
    "Ada Lovelace": 8,
    "Hopper": 9,
    "Blackwell": 10,
}
_CI_PROFILE_OF_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class NVMLError(Exception):
    """Base of the fake's errors, shaped like ``pynvml.NVMLError`` (``.value`` is the code)."""

    value = 999

    def __str__(self) -> str:
        return f"{type(self).__name__.removeprefix('NVMLError_')} ({self.value})"


def _error(name: str, value: int) -> type[NVMLError]:
    return type(f"NVMLError_{name}", (NVMLError,), {"value": value})


NVMLError_Uninitialized = _error("Uninitialized", 1)
NVMLError_InvalidArgument = _error("InvalidArgument", 2)
NVMLError_NotSupported = _error("NotSupported", 3)
NVMLError_NotFound = _error("NotFound", 6)
NVMLError_Timeout = _error("Timeout", 10)
NVMLError_LibraryNotFound = _error("LibraryNotFound", 12)
NVMLError_GpuIsLost = _error("GpuIsLost", 15)
NVMLError_InUse = _error("InUse", 19)
NVMLError_InsufficientResources = _error("InsufficientResources", 23)
_FAULTS: dict[str, type[NVMLError]] = {
    "NotSupported": NVMLError_NotSupported,
    "InsufficientResources": NVMLError_InsufficientResources,
    "GpuIsLost": NVMLError_GpuIsLost,
}


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    """``nvmlGpuInstancePlacement_t``, the same layout as pynvml's."""

    _fields_: ClassVar[list[tuple[str, type[ctypes.c_uint]]]] = [
        ("start", ctypes.c_uint),
        ("size", ctypes.c_uint),
    ]


@dataclass(frozen=True)
class _Device:
    """A device handle: a GPU, or one of its MIG devices."""

    uuid: str
    gi: int | None = None
    ci: int | None = None


@dataclass(frozen=True)
class _GpuInstance:
    uuid: str
    gi: int


@dataclass(frozen=True)
class _ComputeInstance:
    uuid: str
    gi: int
    ci: int


@dataclass(frozen=True)
class _Placement:
    start: int
    size: int


@dataclass(frozen=True)
class _Info:
    """A struct answer (``nvmlGpuInstanceGetInfo``, ``nvmlDeviceGetMemoryInfo``...)."""

    fields: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class _EventSet:
    offset: int
    devices: set[str] = field(default_factory=set)


def mig_device_uuid(gpu: str, gi: int, ci: int) -> str:
    """The deterministic ``MIG-<uuid>`` the fake gives compute instance ``ci`` of ``gi``."""
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{gpu}/{gi}/{ci}')}"


class FakeNvml:
    """A stand-in for the ``pynvml`` module over a simulated root.

    Implements the subset of nvidia-ml-py's functions (same names, arguments, return shapes
    and error classes) that drakit's NVIDIA backend calls, so the backend runs the same code
    over either. What the GPUs are comes from ``drakit-sim/nvml.json``; what they hold now
    (MIG mode, GPU and compute instances, compute mode, lost GPUs) is kept in
    ``drakit-sim/nvml-state.json`` under a file lock, so it survives a crash of the process
    that created it, exactly as MIG instances survive a crash on real hardware. Events come
    from ``drakit-sim/nvml-events.jsonl`` (:func:`inject_xid`, :func:`inject_gpu_lost`).
    Creating a GPU or compute instance writes the MIG capability files the real driver
    publishes under ``proc/driver/nvidia/capabilities`` of the root, and their
    ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes (stand-ins: :mod:`drakit.sim.devnodes`).

    Args:
        root: the simulated root holding ``drakit-sim/nvml.json``.
    """

    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    NVML_COMPUTEMODE_DEFAULT = 0
    NVML_COMPUTEMODE_PROHIBITED = 2
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
    NVML_INIT_FLAG_NO_GPUS = 1
    nvmlEventTypeSingleBitEccError = 0x1
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8
    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_InUse = NVMLError_InUse
    NVMLError_InsufficientResources = NVMLError_InsufficientResources
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._desc: NvmlDescription | None = None
        self._init = 0
        self._lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def desc(self) -> NvmlDescription:
        """The loaded description (``NVMLError_Uninitialized`` before ``nvmlInit``)."""
        if self._init <= 0 or self._desc is None:
            raise NVMLError_Uninitialized()
        return self._desc

    def _gpu(self, handle: Any) -> NvmlGpu:
        if not isinstance(handle, (_Device, _GpuInstance, _ComputeInstance)):
            raise NVMLError_InvalidArgument()
        for gpu in self.desc.devices:
            if gpu.uuid == handle.uuid:
                return gpu
        raise NVMLError_NotFound()

    def _alive(self, handle: Any) -> NvmlGpu:
        gpu = self._gpu(handle)
        if gpu.uuid in self._read_state()["lost"]:
            raise NVMLError_GpuIsLost()
        return gpu

    @contextlib.contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        """The state file, locked for a read-modify-write (across processes)."""
        lock = self.root / _LOCK_PATH
        with self._lock, open(lock, "a+b") as fd:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._read_state()
            yield state
            tmp = self.root / STATE_PATH.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, self.root / STATE_PATH)

    def _read_state(self) -> dict[str, Any]:
        path = self.root / STATE_PATH
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return data
        desc = self._desc or load_nvml_description(self.root)
        return {
            "mig_mode": {g.uuid: int(g.mig_enabled) for g in desc.devices},
            "compute_mode": {g.uuid: 0 for g in desc.devices},
            "instances": {g.uuid: [] for g in desc.devices},
            "lost": [],
        }

    @staticmethod
    def _profile(gpu: NvmlGpu, profile_id: int) -> MigProfile:
        for p in gpu.mig_profiles:
            if p.id == profile_id:
                return p
        raise NVMLError_InvalidArgument()

    def _caps(self, gpu: NvmlGpu, gi: int, ci: int | None = None) -> Path:
        d = self.root / _CAPS / f"gpu{gpu.minor_number}" / "mig" / f"gi{gi}"
        return d / f"ci{ci}" / "access" if ci is not None else d / "access"

    def _write_cap(self, gpu: NvmlGpu, gi: int, ci: int | None) -> None:
        path = self._caps(gpu, gi, ci)
        path.parent.mkdir(parents=True, exist_ok=True)
        minor = self._cap_minor(gpu, gi, ci)
        path.write_text(
            f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
            encoding="ascii",
        )
        make_device_node(self.root, f"/dev/nvidia-caps/nvidia-cap{minor}")

    @staticmethod
    def _cap_minor(gpu: NvmlGpu, gi: int, ci: int | None) -> int:
        return _CAP_MINOR_BASE + gpu.minor_number * 256 + gi * 9 + (0 if ci is None else 1 + ci)

    def _remove_cap(self, gpu: NvmlGpu, gi: int, ci: int | None) -> None:
        """Remove a capability file and its ``/dev/nvidia-caps`` node."""
        self._caps(gpu, gi, ci).unlink(missing_ok=True)
        remove_device_node(self.root, f"/dev/nvidia-caps/nvidia-cap{self._cap_minor(gpu, gi, ci)}")

    # -- init and system -----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        """Load the description (``NVMLError_LibraryNotFound`` when the root has none)."""
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        """Like :meth:`nvmlInit`; ``flags`` are accepted and ignored."""
        del flags
        if not (self.root / NVML_DESCRIPTION_PATH).exists():
            raise NVMLError_LibraryNotFound()
        self._desc = load_nvml_description(self.root)
        self._init += 1

    def nvmlShutdown(self) -> None:
        """Drop one reference taken by ``nvmlInit``."""
        if self._init <= 0:
            raise NVMLError_Uninitialized()
        self._init -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """The driver version string."""
        return self.desc.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """The CUDA driver version as NVML's integer (13000)."""
        return self.desc.cuda_driver_version

    # -- devices -------------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        """GPUs on the node."""
        return len(self.desc.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Device:
        """A handle by NVML index (``GpuIsLost`` for a lost GPU, which nvml.h allows here)."""
        for gpu in self.desc.devices:
            if gpu.index == index:
                handle = _Device(gpu.uuid)
                self._alive(handle)
                return handle
        raise NVMLError_InvalidArgument()

    def nvmlDeviceGetHandleByUUID(self, uuid_: str | bytes) -> _Device:
        """A handle by GPU UUID."""
        text = uuid_.decode() if isinstance(uuid_, bytes) else uuid_
        for gpu in self.desc.devices:
            if gpu.uuid == text:
                self._alive(_Device(gpu.uuid))
                return _Device(gpu.uuid)
        raise NVMLError_NotFound()

    def nvmlDeviceGetUUID(self, handle: _Device) -> str:
        """``GPU-...`` for a GPU, ``MIG-...`` for a MIG device."""
        gpu = self._alive(handle)
        if handle.gi is not None and handle.ci is not None:
            return mig_device_uuid(gpu.uuid, handle.gi, handle.ci)
        return gpu.uuid

    def nvmlDeviceGetName(self, handle: _Device) -> str:
        """The product name."""
        return self._alive(handle).name

    def nvmlDeviceGetBrand(self, handle: _Device) -> int:
        """``NVML_BRAND_*``."""
        return _BRANDS.get(self._alive(handle).brand, 0)

    def nvmlDeviceGetArchitecture(self, handle: _Device) -> int:
        """``NVML_DEVICE_ARCH_*``."""
        return _ARCHITECTURES.get(self._alive(handle).architecture, 0xFFFFFFFF)

    def nvmlDeviceGetSerial(self, handle: _Device) -> str:
        """The board serial."""
        return self._alive(handle).serial

    def nvmlDeviceGetModuleId(self, handle: _Device, moduleId: Any = None) -> int:
        """The module id on the baseboard (``moduleId`` is pynvml's out-parameter, unused)."""
        del moduleId
        return self._alive(handle).module_id

    def nvmlDeviceGetIndex(self, handle: _Device) -> int:
        """The NVML index."""
        return self._alive(handle).index

    def nvmlDeviceGetMinorNumber(self, handle: _Device) -> int:
        """The ``/dev/nvidia<minor>`` minor."""
        return self._alive(handle).minor_number

    def _fault(self, handle: Any, call: str) -> None:
        """Raise the error :func:`inject_nvml_fault` set for this GPU and call, if any."""
        uuid = getattr(handle, "uuid", None)
        faults: dict[str, dict[str, str]] = self._read_state().get("faults", {})
        name = faults.get(str(uuid), {}).get(call)
        if name is not None:
            raise _FAULTS[name]()

    def nvmlDeviceGetMemoryInfo(self, handle: _Device, version: int | None = None) -> _Info:
        """``.total``, ``.free`` and ``.used`` in bytes."""
        del version
        self._fault(handle, "nvmlDeviceGetMemoryInfo")
        total = self._alive(handle).memory_total_bytes
        return _Info({"total": total, "free": total, "used": 0})

    def nvmlDeviceGetPciInfo(self, handle: _Device) -> _Info:
        """``.busId`` as NVML spells it, in bytes (``b"00000000:1B:00.0"``)."""
        gpu = self._alive(handle)
        return _Info({"busId": gpu.nvml_bus_id.encode(), "busIdLegacy": gpu.nvml_bus_id.encode()})

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Device) -> tuple[int, int]:
        """``(major, minor)``."""
        return self._alive(handle).cuda_compute_capability

    def nvmlDeviceGetComputeMode(self, handle: _Device) -> int:
        """``NVML_COMPUTEMODE_*``."""
        gpu = self._alive(handle)
        return int(self._read_state()["compute_mode"].get(gpu.uuid, 0))

    def nvmlDeviceSetComputeMode(self, handle: _Device, mode: int) -> None:
        """Set ``NVML_COMPUTEMODE_*``."""
        gpu = self._alive(handle)
        if mode not in (0, 2, 3):
            raise NVMLError_InvalidArgument()
        with self._state() as state:
            state["compute_mode"][gpu.uuid] = mode

    # -- MIG -----------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: _Device) -> list[int]:
        """``[current, pending]``; ``NVMLError_NotSupported`` on a GPU without MIG."""
        gpu = self._alive(handle)
        if not gpu.mig_capable:
            raise NVMLError_NotSupported()
        mode = int(self._read_state()["mig_mode"].get(gpu.uuid, 0))
        return [mode, mode]

    def nvmlDeviceSetMigMode(self, handle: _Device, mode: int) -> int:
        """Switch MIG mode (takes effect at once in the fake; no GPU reset needed)."""
        gpu = self._alive(handle)
        if not gpu.mig_capable:
            raise NVMLError_NotSupported()
        with self._state() as state:
            if state["instances"].get(gpu.uuid):
                raise NVMLError_InUse()
            state["mig_mode"][gpu.uuid] = int(bool(mode))
        return 0

    def _mig_on(self, gpu: NvmlGpu) -> dict[str, Any]:
        state = self._read_state()
        if not state["mig_mode"].get(gpu.uuid):
            raise NVMLError_NotSupported()
        return state

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: _Device, profile: int, version: int = 2
    ) -> _Info:
        """The profile with index ``profile`` (``NVMLError_NotSupported`` if the GPU lacks it)."""
        del version
        gpu = self._alive(handle)
        for p in gpu.mig_profiles:
            if p.profile == profile:
                return _Info(
                    {
                        "id": p.id,
                        "isP2pSupported": 0,
                        "sliceCount": p.slice_count,
                        "instanceCount": p.instance_count,
                        "multiprocessorCount": p.multiprocessors,
                        "copyEngineCount": p.copy_engines,
                        "decoderCount": p.decoders,
                        "encoderCount": p.encoders,
                        "jpegCount": p.jpeg_engines,
                        "ofaCount": p.ofa_engines,
                        "memorySizeMB": p.memory_mib,
                        "name": f"MIG {p.name}".encode(),
                    }
                )
        raise NVMLError_NotSupported()

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: _Device, profile_id: int, placements: Any, count: Any
    ) -> int:
        """Fill a ``c_nvmlGpuInstancePlacement_t`` array and its ``byref(c_uint)`` count."""
        p = self._profile(self._alive(handle), profile_id)
        n = ctypes.cast(count, ctypes.POINTER(ctypes.c_uint)).contents
        if n.value < len(p.placement_starts):
            n.value = len(p.placement_starts)
            raise NVMLError_InvalidArgument()
        for i, start in enumerate(p.placement_starts):
            placements[i].start = start
            placements[i].size = p.placement_size
        n.value = len(p.placement_starts)
        return 0

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: _Device, profile_id: int, placement: Any
    ) -> _GpuInstance:
        """Create a GPU instance at ``byref(placement)``.

        Raises:
            NVMLError_InvalidArgument: not a placement of that profile.
            NVMLError_InsufficientResources: it overlaps an existing GPU instance.
        """
        gpu = self._alive(handle)
        p = self._profile(gpu, profile_id)
        where = ctypes.cast(placement, ctypes.POINTER(c_nvmlGpuInstancePlacement_t)).contents
        if where.start not in p.placement_starts or where.size != p.placement_size:
            raise NVMLError_InvalidArgument()
        with self._state() as state:
            if not state["mig_mode"].get(gpu.uuid):
                raise NVMLError_NotSupported()
            held = state["instances"].setdefault(gpu.uuid, [])
            lo, hi = where.start, where.start + where.size
            for gi in held:
                if gi["start"] < hi and lo < gi["start"] + gi["size"]:
                    raise NVMLError_InsufficientResources()
            gi_id = min(set(range(1, 64)) - {gi["gi"] for gi in held})
            held.append(
                {"gi": gi_id, "profile_id": p.id, "start": lo, "size": where.size, "ci": []}
            )
        self._write_cap(gpu, gi_id, None)
        return _GpuInstance(gpu.uuid, gi_id)

    def _gi(self, state: dict[str, Any], handle: _GpuInstance) -> dict[str, Any]:
        for gi in state["instances"].get(handle.uuid, []):
            if gi["gi"] == handle.gi:
                return dict(gi)
        raise NVMLError_NotFound()

    def nvmlDeviceGetGpuInstanceById(self, handle: _Device, gi_id: int) -> _GpuInstance:
        """The GPU instance ``gi_id`` of a GPU."""
        gpu = self._alive(handle)
        inst = _GpuInstance(gpu.uuid, gi_id)
        self._gi(self._mig_on(gpu), inst)
        return inst

    def nvmlGpuInstanceGetInfo(self, gi: _GpuInstance) -> _Info:
        """``.device``, ``.id``, ``.profileId`` and ``.placement`` (``.start``, ``.size``)."""
        self._alive(gi)
        rec = self._gi(self._read_state(), gi)
        return _Info(
            {
                "device": _Device(gi.uuid),
                "id": rec["gi"],
                "profileId": rec["profile_id"],
                "placement": _Placement(rec["start"], rec["size"]),
            }
        )

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: _GpuInstance, profile: int, eng_profile: int, version: int = 2
    ) -> _Info:
        """The compute instance profile ``profile`` (by slice count) of a GPU instance."""
        del version
        gpu = self._alive(gi)
        rec = self._gi(self._read_state(), gi)
        slices = self._profile(gpu, rec["profile_id"]).slice_count
        if eng_profile != 0 or _CI_PROFILE_OF_SLICES.get(slices) != profile:
            raise NVMLError_NotSupported()
        return _Info({"id": profile, "sliceCount": slices, "instanceCount": 1})

    def nvmlGpuInstanceCreateComputeInstance(
        self, gi: _GpuInstance, profile_id: int
    ) -> _ComputeInstance:
        """Create the (one, full-size) compute instance of a GPU instance."""
        gpu = self._alive(gi)
        with self._state() as state:
            for rec in state["instances"].get(gi.uuid, []):
                if rec["gi"] == gi.gi:
                    if rec["ci"]:
                        raise NVMLError_InsufficientResources()
                    rec["ci"].append({"id": 0, "profile_id": profile_id})
                    break
            else:
                raise NVMLError_NotFound()
        self._write_cap(gpu, gi.gi, 0)
        return _ComputeInstance(gi.uuid, gi.gi, 0)

    def nvmlGpuInstanceGetComputeInstanceById(
        self, gi: _GpuInstance, ci_id: int
    ) -> _ComputeInstance:
        """Compute instance ``ci_id`` of a GPU instance."""
        self._alive(gi)
        rec = self._gi(self._read_state(), gi)
        if not any(c["id"] == ci_id for c in rec["ci"]):
            raise NVMLError_NotFound()
        return _ComputeInstance(gi.uuid, gi.gi, ci_id)

    def nvmlComputeInstanceGetInfo(self, ci: _ComputeInstance) -> _Info:
        """``.device``, ``.gpuInstance``, ``.id`` and ``.profileId``."""
        self._alive(ci)
        rec = self._gi(self._read_state(), _GpuInstance(ci.uuid, ci.gi))
        for c in rec["ci"]:
            if c["id"] == ci.ci:
                return _Info(
                    {
                        "device": _Device(ci.uuid),
                        "gpuInstance": _GpuInstance(ci.uuid, ci.gi),
                        "id": ci.ci,
                        "profileId": c["profile_id"],
                    }
                )
        raise NVMLError_NotFound()

    def nvmlComputeInstanceDestroy(self, ci: _ComputeInstance) -> int:
        """Destroy a compute instance."""
        gpu = self._alive(ci)
        with self._state() as state:
            for rec in state["instances"].get(ci.uuid, []):
                if rec["gi"] == ci.gi:
                    before = len(rec["ci"])
                    rec["ci"] = [c for c in rec["ci"] if c["id"] != ci.ci]
                    if len(rec["ci"]) == before:
                        raise NVMLError_NotFound()
                    break
            else:
                raise NVMLError_NotFound()
        self._remove_cap(gpu, ci.gi, ci.ci)
        return 0

    def nvmlGpuInstanceDestroy(self, gi: _GpuInstance) -> int:
        """Destroy a GPU instance (``NVMLError_InUse`` while it has compute instances)."""
        gpu = self._alive(gi)
        with self._state() as state:
            held = state["instances"].get(gi.uuid, [])
            rec = next((r for r in held if r["gi"] == gi.gi), None)
            if rec is None:
                raise NVMLError_NotFound()
            if rec["ci"]:
                raise NVMLError_InUse()
            held.remove(rec)
        self._remove_cap(gpu, gi.gi, None)
        with contextlib.suppress(OSError):
            self._caps(gpu, gi.gi).parent.rmdir()
        return 0

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Device) -> int:
        """How many MIG devices the GPU can have at most."""
        self._alive(handle)
        return _MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Device, index: int) -> _Device:
        """The ``index``-th existing MIG device (``NVMLError_NotFound`` past the last)."""
        gpu = self._alive(handle)
        devices = [
            _Device(gpu.uuid, rec["gi"], c["id"])
            for rec in sorted(self._mig_on(gpu)["instances"][gpu.uuid], key=lambda r: r["gi"])
            for c in rec["ci"]
        ]
        if not 0 <= index < len(devices):
            raise NVMLError_NotFound()
        return devices[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: _Device) -> bool:
        """Whether the handle is a MIG device."""
        return handle.gi is not None

    def nvmlDeviceGetGpuInstanceId(self, handle: _Device) -> int:
        """The GPU instance of a MIG device handle."""
        if handle.gi is None:
            raise NVMLError_InvalidArgument()
        return handle.gi

    def nvmlDeviceGetComputeInstanceId(self, handle: _Device) -> int:
        """The compute instance of a MIG device handle."""
        if handle.ci is None:
            raise NVMLError_InvalidArgument()
        return handle.ci

    # -- events --------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        """An event set that sees events injected from now on."""
        self.desc  # noqa: B018 - raises when not initialised
        path = self.root / EVENTS_PATH
        return _EventSet(offset=path.stat().st_size if path.exists() else 0)

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Device) -> int:
        """XID, single- and double-bit ECC events."""
        self._alive(handle)
        return 0xB

    def nvmlDeviceRegisterEvents(
        self, handle: _Device, event_types: int, event_set: _EventSet
    ) -> None:
        """Deliver the GPU's XID events to ``event_set``."""
        self._fault(handle, "nvmlDeviceRegisterEvents")
        gpu = self._alive(handle)
        if event_types & self.nvmlEventTypeXidCriticalError:
            event_set.devices.add(gpu.uuid)

    def nvmlEventSetWait(self, event_set: _EventSet, timeoutms: int) -> _Info:
        """The next event of a registered GPU, waiting up to ``timeoutms``.

        Raises:
            NVMLError_Timeout: nothing arrived in time.
            NVMLError_GpuIsLost: a registered GPU fell off the bus.
        """
        deadline = time.monotonic() + timeoutms / 1000
        path = self.root / EVENTS_PATH
        while True:
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(event_set.offset)
                    for line in f:
                        if not line.endswith(b"\n"):
                            break
                        event_set.offset += len(line)
                        ev = json.loads(line)
                        if ev["uuid"] not in event_set.devices:
                            continue
                        if ev.get("lost"):
                            raise NVMLError_GpuIsLost()
                        return _Info(
                            {
                                "device": _Device(ev["uuid"]),
                                "eventType": self.nvmlEventTypeXidCriticalError,
                                "eventData": ev["xid"],
                                "gpuInstanceId": ev.get("gi", _ALL_INSTANCES),
                                "computeInstanceId": ev.get("ci", _ALL_INSTANCES),
                            }
                        )
            left = deadline - time.monotonic()
            if left <= 0:
                raise NVMLError_Timeout()
            time.sleep(min(0.05, left))

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        """Release an event set."""
        event_set.devices.clear()


def _append_event(root: Path, event: dict[str, Any]) -> None:
    path = Path(root) / EVENTS_PATH
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(event, sort_keys=True) + "\n")


def inject_xid(root: Path, gpu_uuid: str, xid: int, *, gpu_instance: int | None = None) -> None:
    """Make the fake NVML report XID ``xid`` on a GPU (or one GPU instance of it)."""
    event: dict[str, Any] = {"uuid": gpu_uuid, "xid": xid}
    if gpu_instance is not None:
        event.update(gi=gpu_instance, ci=0)
    _append_event(root, event)


def inject_gpu_lost(root: Path, gpu_uuid: str) -> None:
    """Make a GPU fall off the bus: waits raise ``GpuIsLost`` and so do calls on it."""
    fake = FakeNvml(root)
    fake.nvmlInit()
    with fake._state() as state:
        if gpu_uuid not in state["lost"]:
            state["lost"].append(gpu_uuid)
    _append_event(root, {"uuid": gpu_uuid, "lost": True})


FAULT_CALLS = ("nvmlDeviceGetMemoryInfo", "nvmlDeviceRegisterEvents")
"""The calls :func:`inject_nvml_fault` can make fail."""


def inject_nvml_fault(root: Path, gpu_uuid: str, call: str, error: str = "NotSupported") -> None:
    """Make one NVML call fail for one GPU, in every process reading this root, until cleared.

    ``call`` is one of :data:`FAULT_CALLS`; ``error`` names the NVML error raised
    (``NotSupported``, ``InsufficientResources``, ``GpuIsLost``); ``""`` clears the fault.
    """
    if call not in FAULT_CALLS or (error and error not in _FAULTS):
        raise ValueError(f"cannot inject {error!r} into {call!r}")
    fake = FakeNvml(root)
    fake.nvmlInit()
    with fake._state() as state:
        faults = state.setdefault("faults", {}).setdefault(gpu_uuid, {})
        if error:
            faults[call] = error
        else:
            faults.pop(call, None)


def recover_gpu(root: Path, gpu_uuid: str) -> None:
    """Bring a lost GPU back (as a reset or reboot would)."""
    fake = FakeNvml(root)
    fake.nvmlInit()
    with fake._state() as state:
        state["lost"] = [u for u in state["lost"] if u != gpu_uuid]


def mig_instances(root: Path) -> dict[str, list[dict[str, Any]]]:
    """GPU UUID -> its GPU instances now (``gi``, ``profile_id``, ``start``, ``size``, ``ci``)."""
    fake = FakeNvml(root)
    fake.nvmlInit()
    instances: dict[str, list[dict[str, Any]]] = fake._read_state()["instances"]
    return {u: sorted(v, key=lambda r: r["start"]) for u, v in instances.items()}


def simulated_libraries(root: Path) -> dict[str, object]:
    """The fake NVML for a simulated root that has a description, by module name (``pynvml``).

    Registered in the ``drakit.sim_libraries`` entry point group: the simulated runtime
    (``drakit.sim``) calls it for a simulated root and hands the result to the backends as
    ``PluginContext.libraries``; the backend itself never imports this module.
    """
    if (Path(root) / NVML_DESCRIPTION_PATH).exists():
        return {"pynvml": FakeNvml(Path(root))}
    return {}
