"""Named simulated-hardware profiles: the generic ones, vendors' through entry points.

Core ships the CPU-only profiles (built from :mod:`drakit.sim.platform`, facts of
``docs/references.md``, "CPU topology"). Profiles with vendor hardware come from the
distributions that know it, registered in the ``drakit.profiles`` entry point group
(``name = "pkg.module:factory"``, ``factory() -> MachineSpec`` named ``name``): the reference
GPU/NIC machines (``h200-8gpu-8ainic``, ``dgx-h100``, the MI300X boxes...) come with
``drakit-sim-profiles``, which may depend on several backends. Values the references mark
UNCONFIRMED, and pure simulation choices, are listed in ``docs/simulated-hardware.md``.

Example::

    from drakit.sim import materialize

    with materialize("dgx-h100") as root:
        discover(sysfs_root=root / "sys")
"""

from __future__ import annotations

import contextlib
import functools
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from drakit.sim.builder import SysfsBuilder
from drakit.sim.platform import INTEL_FLAGS, genoa_cpu, spr_cpu
from drakit.sim.spec import (
    CacheSpec,
    CpuSpec,
    MachineSpec,
    PciDeviceSpec,
    SimSpecError,
    UnknownProfileError,
)
from drakit.simseam import PROFILE_GROUP, EntryInfo, SimulatorUnavailable, entries, fast_tmp, load

__all__ = [
    "BUILTIN_DISTRIBUTION",
    "DEFAULT_PROFILE",
    "ProfileInfo",
    "build_profile",
    "fast_tmp",
    "get_profile",
    "list_profiles",
    "materialize",
    "profile_info",
    "profile_source",
    "register_profile",
]

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "h200-8gpu-8ainic"
"""The profile demos use when none is named (registered by ``drakit-sim-profiles``)."""

BUILTIN_DISTRIBUTION = "drakit"
""":func:`profile_source` of the profiles core ships."""

_RUNTIME = "registered at run time"

GIB_KIB = 1024 * 1024
_GPU_BASE_CLASSES = (0x03, 0x12)  # display controller, processing accelerator
_NET_BASE_CLASS = 0x02


# -- profiles ----------------------------------------------------------------------------------


def _minimal_1s() -> MachineSpec:
    return MachineSpec(
        name="minimal-1s",
        description="1 socket, 4 cores SMT2 (8 CPUs), 1 NUMA node, no PCI devices; for fast tests",
        cpu=CpuSpec(
            model_name="Intel(R) Xeon(R) E-2334 CPU @ 3.40GHz",
            vendor_id="GenuineIntel",
            cpu_family=6,
            model=167,
            mhz=3400.0,
            sockets=1,
            cores_per_socket=4,
            cores_per_l3=4,
            l1d=CacheSpec(size_kib=48, ways=12),
            l1i=CacheSpec(size_kib=32, ways=8),
            l2=CacheSpec(size_kib=512, ways=8),
            l3=CacheSpec(size_kib=8192, ways=16),
            memory_per_node_kib=32 * GIB_KIB,
            flags=INTEL_FLAGS[:5],
        ),
    )


def _epyc_9654(name: str, description: str, *, nps: int, mem_node_gib: int) -> MachineSpec:
    """Two AMD EPYC 9654 (96 cores, 8 per CCD, 2.4 GHz) in NUMA-per-socket mode ``nps``."""
    cpu = genoa_cpu(
        "AMD EPYC 9654 96-Core Processor", 96, 8, nps=nps, mem_node_gib=mem_node_gib, mhz=2400.0
    )
    return MachineSpec(name=name, description=description, cpu=cpu)


def _epyc_genoa_2s() -> MachineSpec:
    return _epyc_9654(
        "epyc-genoa-2s",
        "2x AMD EPYC 9654 (96c SMT2, 12 CCDs x 8 cores, L3 per CCD), NPS1",
        nps=1,
        mem_node_gib=768,
    )


def _epyc_genoa_2s_nps4() -> MachineSpec:
    return _epyc_9654(
        "epyc-genoa-2s-nps4",
        "2x AMD EPYC 9654 (96c SMT2, L3 per 8-core CCD), NPS4: 4 NUMA nodes per socket",
        nps=4,
        mem_node_gib=192,
    )


def _spr_2s_snc2() -> MachineSpec:
    return MachineSpec(
        name="spr-2s-snc2",
        description="2x Intel Xeon Platinum 8480+ (56c SMT2, socket-wide L3), SNC2: 2 NUMA/socket",
        cpu=spr_cpu("Intel(R) Xeon(R) Platinum 8480+", snc=2, mem_node_gib=256),
    )


_BUILTIN: dict[str, Callable[[], MachineSpec]] = {
    "minimal-1s": _minimal_1s,
    "epyc-genoa-2s": _epyc_genoa_2s,
    "epyc-genoa-2s-nps4": _epyc_genoa_2s_nps4,
    "spr-2s-snc2": _spr_2s_snc2,
}
_FACTORIES: dict[str, Callable[[], MachineSpec]] = dict(_BUILTIN)
"""Core's profiles and those :func:`register_profile` added (these win over entry points)."""
_CACHE: dict[str, MachineSpec] = {}


@functools.cache
def _entry_profiles() -> dict[str, EntryInfo]:
    """Installed ``drakit.profiles`` entry points by name (read once per process)."""
    return {e.name: e for e in entries(PROFILE_GROUP)}


def _load_entry(entry: EntryInfo) -> Callable[[], MachineSpec]:
    try:
        factory = load(PROFILE_GROUP, entry.name)
    except SimulatorUnavailable as e:
        raise SimSpecError(f"simulated-hardware profile {entry.name!r}: {e}") from e
    if not callable(factory):
        raise SimSpecError(
            f"entry point {entry.name!r} = {entry.target!r} in group {PROFILE_GROUP!r} "
            f"(from {entry.distribution}) is not a callable returning a MachineSpec"
        )
    return factory


# -- public API --------------------------------------------------------------------------------


def register_profile(
    name: str, factory: Callable[[], MachineSpec], *, replace: bool = False
) -> None:
    """Add a profile in this process (a vendor ships theirs as a ``drakit.profiles`` entry point).

    Args:
        name: the profile name; must equal the ``name`` of the spec the factory returns.
        factory: returns the machine spec; called lazily, once.
        replace: allow replacing an existing profile of that name (an installed one too).

    Raises:
        ValueError: the name is taken and ``replace`` is false.
    """
    if (name in _FACTORIES or name in _entry_profiles()) and not replace:
        raise ValueError(f"simulated-hardware profile {name!r} already exists")
    _FACTORIES[name] = factory
    _CACHE.pop(name, None)


def list_profiles() -> list[str]:
    """Names of all known profiles (core's, installed entry points, registered), sorted."""
    return sorted(set(_FACTORIES) | set(_entry_profiles()))


def profile_source(name: str) -> str:
    """Where a profile comes from: ``drakit``, the distribution registering it, or run time.

    Raises:
        UnknownProfileError: no profile has that name.
    """
    if name in _BUILTIN and _FACTORIES[name] is _BUILTIN[name]:
        return BUILTIN_DISTRIBUTION
    if name in _FACTORIES:
        return _RUNTIME
    entry = _entry_profiles().get(name)
    if entry is None:
        raise UnknownProfileError(name, list_profiles())
    return entry.distribution


def get_profile(name: str) -> MachineSpec:
    """The machine spec of a named profile (core's, registered, or an installed entry point).

    Raises:
        UnknownProfileError: no profile has that name; the message lists the known ones and
            says that a vendor's profiles come with its package.
        SimSpecError: an installed profile's entry point fails to import or is not callable.
        ValueError: the factory returned a spec with another name.
    """
    spec = _CACHE.get(name)
    if spec is None:
        factory = _FACTORIES.get(name)
        if factory is None:
            entry = _entry_profiles().get(name)
            if entry is None:
                raise UnknownProfileError(name, list_profiles())
            factory = _load_entry(entry)
        spec = factory()
        if not isinstance(spec, MachineSpec):
            raise SimSpecError(
                f"profile factory for {name!r} returned {type(spec).__name__}, not a MachineSpec"
            )
        if spec.name != name:
            raise ValueError(f"profile factory for {name!r} returned a spec named {spec.name!r}")
        _CACHE[name] = spec
    return spec


@dataclass(frozen=True, slots=True)
class ProfileInfo:
    """Summary of a profile: its description and what discovery should find in it.

    Attributes:
        name: profile name.
        description: one line.
        sockets: physical packages.
        cores: physical cores.
        cpus: logical CPUs.
        numa_nodes: NUMA nodes.
        l3_groups: L3 (uncore cache) groups.
        gpus: GPU / accelerator PCI functions (class 0x03 or 0x12).
        nics: network physical functions (class 0x02).
        vfs: SR-IOV virtual functions that exist (``sriov_numvfs`` summed).
        pcie_roots: host bridges.
        distribution: where the profile comes from (:func:`profile_source`).
        kinds: the endpoint PCI functions (bridges left out) by the kind their PCI base class
            names, in class order: ``GPU`` (0x03, display/3D controller), ``processing
            accelerator`` (0x12), ``NIC`` (0x02), ... (:data:`PCI_CLASS_KINDS`; an unnamed
            class shows as ``class 0xNN device``).
    """

    name: str
    description: str
    sockets: int
    cores: int
    cpus: int
    numa_nodes: int
    l3_groups: int
    gpus: int
    nics: int
    vfs: int
    pcie_roots: int
    distribution: str = BUILTIN_DISTRIBUTION
    kinds: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        """One line: the description and the counts (without the name), devices by kind."""
        counts = (
            f"{self.sockets} sockets, {self.cores} cores, {self.cpus} CPUs, "
            f"{self.numa_nodes} NUMA, {self.l3_groups} L3"
        )
        for kind, n in self.kinds.items():
            counts += f", {n} {kind}{'' if n == 1 else 's'}"
        if self.pcie_roots:
            counts += f", {self.vfs} VFs"
        return f"{self.description} [{counts}]"


PCI_CLASS_KINDS: dict[int, str] = {
    0x01: "storage controller",
    0x02: "NIC",
    0x03: "GPU",
    0x04: "multimedia device",
    0x0B: "processor",
    0x0C: "serial bus controller",
    0x12: "processing accelerator",
}
"""What ``drakit sim list`` calls a PCI function of each base class (bridges, 0x06, left out)."""
_BRIDGE_BASE_CLASS = 0x06


def _kinds(devices: Sequence[PciDeviceSpec]) -> dict[str, int]:
    counts: dict[int, int] = {}
    for d in devices:
        base = d.class_code >> 16
        if base != _BRIDGE_BASE_CLASS:
            counts[base] = counts.get(base, 0) + 1
    return {
        PCI_CLASS_KINDS.get(base, f"class 0x{base:02x} device"): n
        for base, n in sorted(counts.items())
    }


def _walk(devices: Sequence[PciDeviceSpec]) -> Iterator[PciDeviceSpec]:
    for dev in devices:
        yield dev
        yield from _walk(dev.children)


def profile_info(name: str) -> ProfileInfo:
    """Description and counts of a profile (``str()`` of the result is one line).

    Raises:
        UnknownProfileError: no profile has that name.
    """
    spec = get_profile(name)
    devices = [d for root in spec.pci_roots for d in _walk(root.children)]
    return ProfileInfo(
        name=spec.name,
        description=spec.description,
        sockets=spec.cpu.sockets,
        cores=spec.cpu.total_cores,
        cpus=spec.cpu.total_cpus,
        numa_nodes=spec.cpu.numa_nodes,
        l3_groups=spec.cpu.l3_groups,
        gpus=sum(1 for d in devices if d.class_code >> 16 in _GPU_BASE_CLASSES),
        nics=sum(1 for d in devices if d.class_code >> 16 == _NET_BASE_CLASS),
        vfs=sum(d.sriov.num_vfs for d in devices if d.sriov is not None),
        pcie_roots=len(spec.pci_roots),
        distribution=profile_source(name),
        kinds=_kinds(devices),
    )


def build_profile(name: str, root: Path) -> Path:
    """Write the named profile's tree under ``root`` (empty or missing) and return ``root``.

    Raises:
        UnknownProfileError: no profile has that name.
        FileExistsError: ``root`` is not empty.
    """
    spec = get_profile(name)
    logger.info("building simulated hardware profile %s under %s", name, root)
    return SysfsBuilder(spec).build(root)


@contextlib.contextmanager
def materialize(name: str, *, tmp_dir: Path | None = None) -> Iterator[Path]:
    """Build the named profile in a temporary directory, yield it, then delete it.

    Args:
        name: the profile.
        tmp_dir: where to create the temporary directory (default: ``/dev/shm`` when
            available, see :func:`fast_tmp`, else ``$TMPDIR``).

    Raises:
        UnknownProfileError: no profile has that name (raised before anything is created).
    """
    get_profile(name)
    where = str(tmp_dir) if tmp_dir is not None else fast_tmp()
    with tempfile.TemporaryDirectory(prefix=f"drakit-sim-{name}-", dir=where) as tmp:
        yield build_profile(name, Path(tmp))
