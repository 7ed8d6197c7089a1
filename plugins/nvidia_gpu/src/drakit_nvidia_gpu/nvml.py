"""The NVML seam: the one place this backend talks to NVML.

Every NVML call goes through :class:`Nvml`, which calls pynvml-shaped functions on a library
object: the ``pynvml`` module of nvidia-ml-py on a node, or the stand-in a simulated root
brings (``PluginContext.libraries["pynvml"]``, the simulator's fake NVML). Both take the same
code path from here up. Where NVML cannot be loaded (no driver, no library) :func:`open_nvml`
answers ``None`` and says why once; the backend then publishes no GPUs and the other backends
go on.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL_INSTANCES",
    "ARCHITECTURES",
    "BRANDS",
    "Nvml",
    "NvmlUnavailable",
    "open_nvml",
]

logger = logging.getLogger(__name__)

ALL_INSTANCES = 0xFFFFFFFF
"""``gpuInstanceId``/``computeInstanceId`` of an event for the whole GPU."""

#: NVML_BRAND_* -> the strings go-nvlib (and so NVIDIA's DRA driver) publishes.
BRANDS = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}
#: NVML_DEVICE_ARCH_* -> go-nvlib's architecture strings.
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
}
_CI_PROFILE_OF_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_MAX_PLACEMENTS = 16
_MAX_INSTANCE_ID = 32
_MAX_PROFILES = 0x12


class NvmlUnavailable(Exception):
    """NVML cannot be used on this node (no library, no driver)."""


@dataclass(frozen=True)
class GiInfo:
    """A GPU instance that exists: its id, profile and placement."""

    id: int
    profile_id: int
    start: int
    size: int


def open_nvml(libraries: Mapping[str, Any]) -> Nvml:
    """Load and initialise NVML: the simulated root's stand-in if there is one, else pynvml.

    Raises:
        NvmlUnavailable: the bindings or the driver library are missing, or init failed.
    """
    lib = libraries.get("pynvml")
    if lib is None:
        try:
            lib = importlib.import_module("pynvml")
        except ImportError as e:
            raise NvmlUnavailable(f"the nvidia-ml-py bindings are not installed ({e})") from e
    try:
        lib.nvmlInitWithFlags(lib.NVML_INIT_FLAG_NO_GPUS)
    except lib.NVMLError as e:
        raise NvmlUnavailable(f"NVML did not initialise: {e}") from e
    return Nvml(lib)


class Nvml:
    """Typed calls over a pynvml-shaped library (the real module or the fake).

    Handles (GPUs, MIG devices, GPU and compute instances) are opaque: whatever the library
    returns is passed back to it. Calls that fill ctypes arrays use the library's own
    structure types.
    """

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.error: type[Exception] = lib.NVMLError
        self.not_found: type[Exception] = lib.NVMLError_NotFound
        self.not_supported: type[Exception] = lib.NVMLError_NotSupported
        self.timeout: type[Exception] = lib.NVMLError_Timeout
        self.gpu_lost: type[Exception] = lib.NVMLError_GpuIsLost

    # -- system and devices --------------------------------------------------------------------

    def driver_version(self) -> str:
        """``nvmlSystemGetDriverVersion``."""
        return _text(self.lib.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion`` (13000 = CUDA 13.0)."""
        return int(self.lib.nvmlSystemGetCudaDriverVersion())

    def handles(self) -> list[Any]:
        """Every GPU's handle, by NVML index; ``None`` for a GPU that has fallen off the bus.

        ``nvmlDeviceGetHandleByIndex`` itself may answer ``GpuIsLost`` for such a GPU (nvml.h),
        so it is asked GPU by GPU: one lost GPU does not hide the others.
        """
        out: list[Any] = []
        self.handle_errors: dict[int, str] = {}
        """NVML index -> why the last :meth:`handles` got no handle for it (not lost)."""
        for i in range(self.lib.nvmlDeviceGetCount()):
            try:
                out.append(self.lib.nvmlDeviceGetHandleByIndex(i))
            except self.gpu_lost:
                out.append(None)
            except self.error as e:  # any other refusal for one GPU hides only that GPU
                logger.warning("NVML GPU %d: no handle (%r); it is skipped this round", i, e)
                self.handle_errors[i] = repr(e)
                out.append(None)
        return out

    def handle(self, uuid: str) -> Any:
        """A GPU's handle by UUID."""
        return self.lib.nvmlDeviceGetHandleByUUID(uuid)

    def uuid(self, h: Any) -> str:
        """``GPU-...`` (or ``MIG-...`` for a MIG device handle)."""
        return _text(self.lib.nvmlDeviceGetUUID(h))

    def name(self, h: Any) -> str:
        """The product name."""
        return _text(self.lib.nvmlDeviceGetName(h))

    def brand(self, h: Any) -> str:
        """go-nvlib's brand string."""
        return BRANDS.get(int(self.lib.nvmlDeviceGetBrand(h)), "Unknown")

    def architecture(self, h: Any) -> str:
        """go-nvlib's architecture string."""
        return ARCHITECTURES.get(int(self.lib.nvmlDeviceGetArchitecture(h)), "Unknown")

    def compute_capability(self, h: Any) -> tuple[int, int]:
        """``(major, minor)``."""
        major, minor = self.lib.nvmlDeviceGetCudaComputeCapability(h)
        return int(major), int(minor)

    def minor(self, h: Any) -> int:
        """The ``/dev/nvidia<minor>`` minor number."""
        return int(self.lib.nvmlDeviceGetMinorNumber(h))

    def memory(self, h: Any) -> int | None:
        """Total memory in bytes (``None`` where NVML does not support the query)."""
        try:
            return int(self.lib.nvmlDeviceGetMemoryInfo(h).total)
        except self.not_supported:
            return None

    def pci_bus_id(self, h: Any) -> str:
        """The bus id in sysfs spelling: NVML's ``00000000:1B:00.0`` -> ``0000:1b:00.0``."""
        bus = _text(self.lib.nvmlDeviceGetPciInfo(h).busId).lower()
        return bus[4:] if len(bus) == 16 else bus  # noqa: PLR2004 - 8-digit domain

    def mig_enabled(self, h: Any) -> bool | None:
        """Current MIG mode; ``None`` on a GPU without MIG."""
        try:
            current, _pending = self.lib.nvmlDeviceGetMigMode(h)
        except self.not_supported:
            return None
        return bool(current == self.lib.NVML_DEVICE_MIG_ENABLE)

    def compute_mode(self, h: Any) -> int:
        """``NVML_COMPUTEMODE_*``."""
        return int(self.lib.nvmlDeviceGetComputeMode(h))

    def set_compute_mode(self, h: Any, mode: int) -> None:
        """Set ``NVML_COMPUTEMODE_*``."""
        self.lib.nvmlDeviceSetComputeMode(h, mode)

    # -- MIG -----------------------------------------------------------------------------------

    def mig_profiles(self, h: Any) -> list[tuple[Any, list[tuple[int, int]]]]:
        """Every GPU instance profile the GPU supports, with its placements (start, size)."""
        out = []
        for index in range(_MAX_PROFILES):
            try:
                info = self.lib.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except self.error:
                continue
            if not info.instanceCount:
                continue
            arr = (self.lib.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(_MAX_PLACEMENTS)
            self.lib.nvmlDeviceGetGpuInstancePossiblePlacements(
                h, info.id, arr, ctypes.byref(count)
            )
            out.append((info, [(int(arr[i].start), int(arr[i].size)) for i in range(count.value)]))
        return out

    def gpu_instances(self, h: Any) -> list[tuple[Any, GiInfo]]:
        """The GPU instances that exist on a GPU (``[]`` when MIG mode is off)."""
        out = []
        for gi_id in range(_MAX_INSTANCE_ID):
            try:
                gi = self.lib.nvmlDeviceGetGpuInstanceById(h, gi_id)
                info = self.lib.nvmlGpuInstanceGetInfo(gi)
            except self.gpu_lost:
                raise
            except self.error:  # not found, or not a valid id on this GPU
                continue
            out.append(
                (
                    gi,
                    GiInfo(
                        id=int(info.id),
                        profile_id=int(info.profileId),
                        start=int(info.placement.start),
                        size=int(info.placement.size),
                    ),
                )
            )
        return out

    def compute_instances(self, gi: Any) -> list[tuple[Any, int]]:
        """The compute instances of a GPU instance, with their ids."""
        out = []
        for ci_id in range(_MAX_INSTANCE_ID // 4):
            try:
                out.append((self.lib.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id), ci_id))
            except self.error:
                continue
        return out

    def create_gpu_instance(self, h: Any, profile_id: int, start: int, size: int) -> Any:
        """Create a GPU instance of a profile at a placement."""
        placement = self.lib.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        return self.lib.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, profile_id, ctypes.byref(placement)
        )

    def create_compute_instance(self, gi: Any, slices: int) -> tuple[Any, int]:
        """Create the one compute instance spanning a GPU instance; returns it and its id."""
        profile = _CI_PROFILE_OF_SLICES[slices]
        info = self.lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gi, profile, self.lib.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        )
        ci = self.lib.nvmlGpuInstanceCreateComputeInstance(gi, info.id)
        return ci, int(self.lib.nvmlComputeInstanceGetInfo(ci).id)

    def destroy(self, gi: Any) -> None:
        """Destroy a GPU instance and its compute instances."""
        for ci, _ in self.compute_instances(gi):
            self.lib.nvmlComputeInstanceDestroy(ci)
        self.lib.nvmlGpuInstanceDestroy(gi)

    def mig_device_uuid(self, h: Any, gi_id: int, ci_id: int) -> str | None:
        """The ``MIG-...`` UUID of compute instance ``ci_id`` of GPU instance ``gi_id``."""
        for i in range(int(self.lib.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                mig = self.lib.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except self.error:
                continue
            if (
                int(self.lib.nvmlDeviceGetGpuInstanceId(mig)) == gi_id
                and int(self.lib.nvmlDeviceGetComputeInstanceId(mig)) == ci_id
            ):
                return self.uuid(mig)
        return None

    # -- events --------------------------------------------------------------------------------

    def event_set(self, handles: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
        """An event set with every GPU that supports XID events registered for them.

        ``handles``: GPU UUID -> handle. Returns the set and, per GPU that could not be
        registered (NVML answered NotSupported or another error for it), why: health watching
        is off for that GPU alone.

        Raises:
            self.error: the event set itself cannot be created.
        """
        es = self.lib.nvmlEventSetCreate()
        xid = self.lib.nvmlEventTypeXidCriticalError
        unwatched: dict[str, str] = {}
        for uuid, h in handles.items():
            try:
                supported = int(self.lib.nvmlDeviceGetSupportedEventTypes(h))
                if not supported & xid:
                    unwatched[uuid] = "does not report XID events"
                    continue
                self.lib.nvmlDeviceRegisterEvents(h, xid, es)
            except self.error as e:
                unwatched[uuid] = f"NVML refused event registration: {e!r}"
        return es, unwatched

    def wait(self, es: Any, timeout_ms: int) -> Any:
        """The next event (``self.timeout`` / ``self.gpu_lost`` are raised as NVML does)."""
        return self.lib.nvmlEventSetWait(es, timeout_ms)

    def free(self, es: Any) -> None:
        """Release an event set."""
        self.lib.nvmlEventSetFree(es)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
