"""CPU topology model with kubelet cpumanager semantics, and its discovery from sysfs.

The model is the one kubelet's cpumanager allocates against (``topology.CPUTopology`` in
``pkg/kubelet/cm/cpumanager/topology``): one :class:`CpuInfo` per online logical CPU, plus the
machine-wide counts kubelet carries next to the per-CPU details. The allocation algorithms in
:mod:`drakit_cpu.allocator` only use the query helpers defined here.

Conventions (all kubelet's, sources in ``docs/references.md``):

* ``core_id`` is the **lowest logical CPU id among the core's SMT siblings** (kubelet's
  ``getUniqueCoreID``), so it is unique machine-wide, unlike sysfs ``core_id`` which repeats per
  package. Hand-built topologies may use any ids; CPUs with the same ``core_id`` form one core.
* ``uncore_cache_id`` is the L3 ``id`` when the L3 is shared by a different number of CPUs than
  the CPU's NUMA node holds (AMD CCDs, Intel SNC), otherwise the socket id (cadvisor keeps an L3
  that exactly covers a NUMA node as a node-level cache, and kubelet falls back to the socket).
* The counts (``num_cpus``, ``num_sockets``...) are *declared* values, exactly like kubelet's
  ``NumCPUs``/``NumSockets``/``NumCores``/``NumNUMANodes``/``NumUncoreCache`` fields. They are
  derived from the CPU list unless given explicitly; the per-unit sizes kubelet derives from them
  (:meth:`CpuTopology.cpus_per_core` and friends) are integer divisions, as upstream.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from drakit.cpuset import CpuListError, parse_cpulist

__all__ = ["CpuInfo", "CpuTopology", "TopologyError", "cpulist_in", "int_in"]

logger = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_CACHE_DIR = re.compile(r"^index(\d+)$")
_UNCORE_CACHE_LEVEL = 3

_EMPTY: frozenset[int] = frozenset()


class TopologyError(ValueError):
    """A topology is inconsistent, or sysfs does not describe one that can be used."""


@dataclass(frozen=True, slots=True, order=True)
class CpuInfo:
    """Where one logical CPU sits (kubelet's ``CPUInfo`` plus the CPU id itself).

    Attributes:
        cpu: the logical CPU id (``/sys/devices/system/cpu/cpuN``).
        core_id: the physical core; kubelet convention: the lowest CPU id of the core.
        socket_id: the package (``physical_package_id``).
        numa_node: the NUMA node holding the CPU.
        uncore_cache_id: the uncore (L3) cache group; the socket id when the L3 is not split.
    """

    cpu: int
    core_id: int
    socket_id: int
    numa_node: int
    uncore_cache_id: int


def _index(pairs: Iterable[tuple[int, int]]) -> Mapping[int, frozenset[int]]:
    """Group ``(key, value)`` pairs into a read-only ``key -> frozenset(values)`` mapping."""
    grouped: dict[int, set[int]] = {}
    for key, value in pairs:
        grouped.setdefault(key, set()).add(value)
    return MappingProxyType({key: frozenset(values) for key, values in grouped.items()})


@dataclass(frozen=True)
class CpuTopology:
    """The CPUs of a machine and how they group into cores, uncore caches, NUMA nodes, sockets.

    Build one with :meth:`from_cpus` (counts derived from the CPU list unless overridden) or
    :meth:`from_sysfs`. Instances are immutable and hashable; all query helpers return
    ``frozenset`` and are O(1) lookups into indexes built once.

    Attributes:
        cpus: one entry per logical CPU, sorted by CPU id.
        num_cpus: declared number of CPUs (kubelet ``NumCPUs``).
        num_sockets: declared number of sockets (``NumSockets``).
        num_cores: declared number of physical cores (``NumCores``).
        num_numa_nodes: declared number of NUMA nodes (``NumNUMANodes``).
        num_uncore_caches: declared number of uncore caches (``NumUncoreCache``).
        numa_distances: SLIT rows as ``(node, (d0, d1, ...))`` pairs, sorted by node; empty when
            unknown. Row entries are in node-id order of the nodes the kernel lists.
    """

    cpus: tuple[CpuInfo, ...]
    num_cpus: int
    num_sockets: int
    num_cores: int
    num_numa_nodes: int
    num_uncore_caches: int
    numa_distances: tuple[tuple[int, tuple[int, ...]], ...] = ()

    _by_cpu: Mapping[int, CpuInfo] = field(init=False, repr=False, compare=False)
    _cpu_ids: frozenset[int] = field(init=False, repr=False, compare=False)
    _socket_cpus: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _numa_cpus: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _core_cpus: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _uncore_cpus: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _socket_numas: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _numa_sockets: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _socket_cores: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _numa_cores: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _numa_uncores: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)
    _uncore_cores: Mapping[int, frozenset[int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = [info.cpu for info in self.cpus]
        if ids != sorted(set(ids)):
            raise TopologyError("CPU ids must be unique and the CPU list sorted by CPU id")
        counts = {
            "num_cpus": self.num_cpus,
            "num_sockets": self.num_sockets,
            "num_cores": self.num_cores,
            "num_numa_nodes": self.num_numa_nodes,
            "num_uncore_caches": self.num_uncore_caches,
        }
        for name, value in counts.items():
            if value < 0:
                raise TopologyError(f"{name} must not be negative (got {value})")
        cpus = self.cpus
        setter = object.__setattr__
        setter(self, "_by_cpu", MappingProxyType({info.cpu: info for info in cpus}))
        setter(self, "_cpu_ids", frozenset(ids))
        setter(self, "_socket_cpus", _index((i.socket_id, i.cpu) for i in cpus))
        setter(self, "_numa_cpus", _index((i.numa_node, i.cpu) for i in cpus))
        setter(self, "_core_cpus", _index((i.core_id, i.cpu) for i in cpus))
        setter(self, "_uncore_cpus", _index((i.uncore_cache_id, i.cpu) for i in cpus))
        setter(self, "_socket_numas", _index((i.socket_id, i.numa_node) for i in cpus))
        setter(self, "_numa_sockets", _index((i.numa_node, i.socket_id) for i in cpus))
        setter(self, "_socket_cores", _index((i.socket_id, i.core_id) for i in cpus))
        setter(self, "_numa_cores", _index((i.numa_node, i.core_id) for i in cpus))
        setter(self, "_numa_uncores", _index((i.numa_node, i.uncore_cache_id) for i in cpus))
        setter(self, "_uncore_cores", _index((i.uncore_cache_id, i.core_id) for i in cpus))

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_cpus(
        cls,
        cpus: Iterable[CpuInfo],
        *,
        num_cpus: int | None = None,
        num_sockets: int | None = None,
        num_cores: int | None = None,
        num_numa_nodes: int | None = None,
        num_uncore_caches: int | None = None,
        numa_distances: Mapping[int, Sequence[int]] | None = None,
    ) -> CpuTopology:
        """Build a topology from per-CPU details, deriving every count that is not given.

        Derived counts are the number of distinct CPUs, sockets, cores, NUMA nodes and uncore
        caches, which is what kubelet's ``topology.Discover`` computes on a real machine.
        Explicit counts exist to reproduce hand-written upstream fixtures, some of which leave
        ``NumNUMANodes``/``NumUncoreCache`` at 0 or declare counts that differ from the details.

        Args:
            cpus: the per-CPU details, in any order.
            num_cpus: declared ``NumCPUs``.
            num_sockets: declared ``NumSockets``.
            num_cores: declared ``NumCores``.
            num_numa_nodes: declared ``NumNUMANodes``.
            num_uncore_caches: declared ``NumUncoreCache``.
            numa_distances: optional SLIT rows, ``node -> distances``.

        Raises:
            TopologyError: duplicate CPU ids or negative counts.
        """
        infos = tuple(sorted(cpus))
        distances = tuple(
            sorted((node, tuple(row)) for node, row in (numa_distances or {}).items())
        )
        return cls(
            cpus=infos,
            num_cpus=len(infos) if num_cpus is None else num_cpus,
            num_sockets=(len({i.socket_id for i in infos}) if num_sockets is None else num_sockets),
            num_cores=len({i.core_id for i in infos}) if num_cores is None else num_cores,
            num_numa_nodes=(
                len({i.numa_node for i in infos}) if num_numa_nodes is None else num_numa_nodes
            ),
            num_uncore_caches=(
                len({i.uncore_cache_id for i in infos})
                if num_uncore_caches is None
                else num_uncore_caches
            ),
            numa_distances=distances,
        )

    @classmethod
    def from_sysfs(
        cls,
        root: Path,
        numa_distances: bool | Mapping[int, Sequence[int]] = True,
    ) -> CpuTopology:
        """Discover the topology from a sysfs tree, the way kubelet (via cadvisor) sees it.

        Reads, under ``root`` (the filesystem root, so ``root / "sys"`` is sysfs):

        * ``sys/devices/system/cpu/online`` (all ``cpuN`` directories when absent);
        * ``cpuN/topology/{physical_package_id,core_id,core_cpus_list}`` (falling back to
          ``thread_siblings_list``, then to grouping by package and ``core_id``);
        * ``cpuN/cache/index*/{level,id,shared_cpu_list}`` for the level-3 cache;
        * ``sys/devices/system/node/nodeN/cpulist`` and, if asked, ``nodeN/distance``.

        CPUs outside every NUMA node directory (non-NUMA kernels) are put on node 0.

        Args:
            root: the directory that holds ``sys`` (``/`` on a real node, a simulated root in
                tests).
            numa_distances: ``True`` to read ``nodeN/distance``, ``False`` to skip distances,
                or an explicit ``node -> distances`` mapping to use instead of sysfs.

        Raises:
            TopologyError: a required file is missing or malformed, or no CPU is online.
        """
        cpu_root = root / "sys" / "devices" / "system" / "cpu"
        node_root = root / "sys" / "devices" / "system" / "node"
        online = _online_cpus(cpu_root)

        node_of: dict[int, int] = {}
        node_cpus: dict[int, frozenset[int]] = {}
        node_ids = _numbered_dirs(node_root, _NODE_DIR)
        for node in node_ids:
            listed = _read_cpulist(node_root / f"node{node}" / "cpulist") & online
            node_cpus[node] = listed
            for cpu in listed:
                node_of.setdefault(cpu, node)

        raw: list[tuple[int, int, int, frozenset[int] | None, tuple[int, frozenset[int]] | None]]
        raw = []
        for cpu in sorted(online):
            topo_dir = cpu_root / f"cpu{cpu}" / "topology"
            package = _read_int(topo_dir / "physical_package_id")
            core = _read_int(topo_dir / "core_id")
            siblings = _first_cpulist(topo_dir, ("core_cpus_list", "thread_siblings_list"))
            raw.append((cpu, package, core, siblings, _l3_of(cpu_root / f"cpu{cpu}" / "cache")))

        # kubelet's getUniqueCoreID: the lowest online thread of the core.
        group_min: dict[object, int] = {}
        keys: dict[int, object] = {}
        for cpu, package, core, siblings, _ in raw:
            key: object = (package, siblings & online) if siblings else (package, core)
            keys[cpu] = key
            group_min[key] = min(cpu, group_min.get(key, cpu))

        infos: list[CpuInfo] = []
        for cpu, package, _core, _siblings, l3 in raw:
            node = node_of.get(cpu, 0)
            uncore = package
            if l3 is not None:
                l3_id, shared = l3
                node_size = len(node_cpus.get(node, online))
                if len(shared) != node_size:
                    uncore = l3_id
            infos.append(
                CpuInfo(
                    cpu=cpu,
                    core_id=group_min[keys[cpu]],
                    socket_id=package,
                    numa_node=node,
                    uncore_cache_id=uncore,
                )
            )

        distances: Mapping[int, Sequence[int]] | None
        if isinstance(numa_distances, Mapping):
            distances = numa_distances
        elif numa_distances:
            distances = _read_distances(node_root, node_ids)
        else:
            distances = None
        topology = cls.from_cpus(infos, numa_distances=distances)
        logger.debug(
            "discovered CPU topology under %s: %d cpus, %d cores, %d sockets, "
            "%d NUMA nodes, %d uncore caches",
            root,
            topology.num_cpus,
            topology.num_cores,
            topology.num_sockets,
            topology.num_numa_nodes,
            topology.num_uncore_caches,
        )
        return topology

    # ---------------------------------------------------------------- derived sizes

    def cpus_per_core(self) -> int:
        """``NumCPUs // NumCores`` (0 without cores): the SMT level kubelet assumes."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    def cpus_per_socket(self) -> int:
        """``NumCPUs // NumSockets`` (0 without sockets)."""
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    def cpus_per_uncore(self) -> int:
        """``NumCPUs // NumUncoreCache`` (0 when no uncore cache is declared)."""
        return self.num_cpus // self.num_uncore_caches if self.num_uncore_caches else 0

    @property
    def numa_first(self) -> bool:
        """Whether NUMA nodes rank above sockets (kubelet: ``NumSockets >= NumNUMANodes``).

        True for one NUMA node per socket and for several sockets per node; False when a socket
        is split into several NUMA nodes (AMD NPS2/NPS4, Intel SNC).
        """
        return self.num_sockets >= self.num_numa_nodes

    # ---------------------------------------------------------------- queries

    @property
    def cpu_ids(self) -> frozenset[int]:
        """All logical CPU ids."""
        return self._cpu_ids

    @property
    def cpu_map(self) -> Mapping[int, CpuInfo]:
        """Read-only ``cpu id -> CpuInfo`` mapping (kubelet's ``CPUDetails``)."""
        return self._by_cpu

    def info(self, cpu: int) -> CpuInfo:
        """The details of one CPU.

        Raises:
            KeyError: the CPU is not part of this topology.
        """
        return self._by_cpu[cpu]

    def sockets(self) -> frozenset[int]:
        """The socket ids that hold at least one CPU."""
        return frozenset(self._socket_cpus)

    def numa_nodes(self) -> frozenset[int]:
        """The NUMA node ids that hold at least one CPU."""
        return frozenset(self._numa_cpus)

    def cores(self) -> frozenset[int]:
        """The core ids."""
        return frozenset(self._core_cpus)

    def uncore_caches(self) -> frozenset[int]:
        """The uncore cache ids."""
        return frozenset(self._uncore_cpus)

    def cpus_in_socket(self, socket_id: int) -> frozenset[int]:
        """The CPUs of a socket (empty for an unknown id)."""
        return self._socket_cpus.get(socket_id, _EMPTY)

    def cpus_in_numa_node(self, numa_node: int) -> frozenset[int]:
        """The CPUs of a NUMA node (empty for an unknown id)."""
        return self._numa_cpus.get(numa_node, _EMPTY)

    def cpus_in_core(self, core_id: int) -> frozenset[int]:
        """The CPUs (SMT threads) of a core (empty for an unknown id)."""
        return self._core_cpus.get(core_id, _EMPTY)

    def cpus_in_uncore_cache(self, uncore_cache_id: int) -> frozenset[int]:
        """The CPUs sharing an uncore cache (empty for an unknown id)."""
        return self._uncore_cpus.get(uncore_cache_id, _EMPTY)

    def numa_nodes_in_socket(self, socket_id: int) -> frozenset[int]:
        """The NUMA nodes that hold CPUs of a socket."""
        return self._socket_numas.get(socket_id, _EMPTY)

    def sockets_in_numa_node(self, numa_node: int) -> frozenset[int]:
        """The sockets that hold CPUs of a NUMA node."""
        return self._numa_sockets.get(numa_node, _EMPTY)

    def cores_in_socket(self, socket_id: int) -> frozenset[int]:
        """The cores with a CPU in a socket."""
        return self._socket_cores.get(socket_id, _EMPTY)

    def cores_in_numa_node(self, numa_node: int) -> frozenset[int]:
        """The cores with a CPU in a NUMA node."""
        return self._numa_cores.get(numa_node, _EMPTY)

    def uncore_caches_in_numa_node(self, numa_node: int) -> frozenset[int]:
        """The uncore caches with a CPU in a NUMA node (an SNC L3 spans several nodes)."""
        return self._numa_uncores.get(numa_node, _EMPTY)

    def cores_in_uncore_cache(self, uncore_cache_id: int) -> frozenset[int]:
        """The cores with a CPU sharing an uncore cache."""
        return self._uncore_cores.get(uncore_cache_id, _EMPTY)

    def siblings(self, cpu: int) -> frozenset[int]:
        """All SMT threads of the core of ``cpu``, ``cpu`` included.

        Raises:
            KeyError: the CPU is not part of this topology.
        """
        return self._core_cpus[self._by_cpu[cpu].core_id]

    def numa_distance(self, from_node: int, to_node: int) -> int | None:
        """The SLIT distance between two NUMA nodes, or ``None`` when unknown.

        Rows list one value per NUMA node in node-id order (the kernel's ``distance`` file),
        so the column is the position of ``to_node`` among the nodes that have a row.
        """
        rows = dict(self.numa_distances)
        row = rows.get(from_node)
        if row is None or to_node not in rows:
            return None
        column = sorted(rows).index(to_node)
        return row[column] if column < len(row) else None


# -------------------------------------------------------------------- sysfs helpers


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise TopologyError(f"cannot read {path}: {exc.strerror or exc}") from exc


def int_in(path: Path, text: str) -> int:
    """``text``, read from the sysfs file ``path``, as an integer.

    Raises:
        TopologyError: naming ``path``, where ``text`` is not an integer.
    """
    try:
        return int(text)
    except ValueError as exc:
        raise TopologyError(f"{path} holds {text!r}, not an integer") from exc


def cpulist_in(path: Path, text: str) -> frozenset[int]:
    """``text``, read from the sysfs file ``path``, as a CPU list (``0-3,8``).

    Raises:
        TopologyError: naming ``path``, where ``text`` is not a CPU list.
    """
    try:
        return parse_cpulist(text)
    except CpuListError as exc:
        raise TopologyError(f"{path}: {exc}") from exc


def _read_int(path: Path) -> int:
    return int_in(path, _read_text(path))


def _read_cpulist(path: Path) -> frozenset[int]:
    return cpulist_in(path, _read_text(path))


def _first_cpulist(directory: Path, names: Sequence[str]) -> frozenset[int] | None:
    for name in names:
        path = directory / name
        if path.is_file():
            return _read_cpulist(path)
    return None


def _numbered_dirs(parent: Path, pattern: re.Pattern[str]) -> list[int]:
    if not parent.is_dir():
        return []
    found = []
    for child in parent.iterdir():
        match = pattern.match(child.name)
        if match and child.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)


def _online_cpus(cpu_root: Path) -> frozenset[int]:
    online_file = cpu_root / "online"
    if online_file.is_file():
        online = _read_cpulist(online_file)
    else:
        online = frozenset(_numbered_dirs(cpu_root, _CPU_DIR))
    if not online:
        raise TopologyError(f"no online CPU found under {cpu_root}")
    return online


def _l3_of(cache_dir: Path) -> tuple[int, frozenset[int]] | None:
    """The level-3 cache of a CPU as ``(id, shared CPUs)``, or ``None`` without one."""
    for index in _numbered_dirs(cache_dir, _CACHE_DIR):
        entry = cache_dir / f"index{index}"
        level_file = entry / "level"
        if not level_file.is_file() or _read_int(level_file) != _UNCORE_CACHE_LEVEL:
            continue
        shared = _read_cpulist(entry / "shared_cpu_list")
        id_file = entry / "id"
        # Some ARM kernels have no cache id; the lowest sharing CPU identifies the cache then.
        cache_id = _read_int(id_file) if id_file.is_file() else min(shared, default=0)
        return cache_id, shared
    return None


def _read_distances(node_root: Path, node_ids: Sequence[int]) -> dict[int, list[int]]:
    distances: dict[int, list[int]] = {}
    for node in node_ids:
        path = node_root / f"node{node}" / "distance"
        if not path.is_file():
            logger.warning("no NUMA distance file at %s; distances unknown", path)
            return {}
        text = _read_text(path)
        try:
            distances[node] = [int(value) for value in text.split()]
        except ValueError as exc:
            raise TopologyError(f"{path} holds {text!r}, not a list of integers") from exc
    return distances
