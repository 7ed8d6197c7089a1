"""CPU allocation with exact kubelet cpumanager parity (static policy algorithms).

A line-by-line port of ``pkg/kubelet/cm/cpumanager/cpu_assignment.go`` at kubernetes commit
:data:`UPSTREAM_COMMIT` (the copy vendored by kubernetes-sigs/dra-driver-cpu, "v1.35.0"), plus
the ``full-pcpus-only`` admission check of ``policy_static.go``. For the same topology, free
CPUs and count, every function here returns the CPUs kubelet would pick, including its
tie-breaking, its integer-division size helpers and its known quirks; ``docs/cpu-allocation.md``
describes the algorithms and the two places where kubelet would hang instead of answering.

Public entry points, one per kubelet static-policy configuration:

* :func:`take_packed` - the default (``TakeByTopologyNUMAPacked``), optionally with
  ``prefer-align-cpus-by-uncorecache`` and ``full-pcpus-only``;
* :func:`take_spread` - ``distribute-cpus-across-cores``;
* :func:`take_distributed` - ``distribute-cpus-across-numa`` (``takeByTopologyNUMADistributed``);
* :func:`check_full_pcpus_only` - the ``full-pcpus-only`` admission check on its own, for callers
  that split one request into several takes (kubelet checks the whole request once).

They are pure functions of their arguments: no I/O, no state. Errors are
:class:`AllocationError` (a ``ValueError``) carrying kubelet's message.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Final

from drakit.cpuset import format_cpulist
from drakit_cpu.topology import CpuInfo, CpuTopology

__all__ = [
    "UPSTREAM_COMMIT",
    "AllocationError",
    "NotEnoughCpusError",
    "SMTAlignmentError",
    "check_full_pcpus_only",
    "take_distributed",
    "take_packed",
    "take_spread",
]

logger = logging.getLogger(__name__)

UPSTREAM_COMMIT: Final = "fd5b2efa76e44c5ef523cd0711f5ed23eb7e6b1a"
"""The kubernetes commit whose ``cpu_assignment.go`` this module reproduces."""

_EMPTY: frozenset[int] = frozenset()

_Key = Callable[[CpuInfo], int]
_CPU: _Key = attrgetter("cpu")
_CORE: _Key = attrgetter("core_id")
_SOCKET: _Key = attrgetter("socket_id")
_NUMA: _Key = attrgetter("numa_node")
_UNCORE: _Key = attrgetter("uncore_cache_id")


class AllocationError(ValueError):
    """No CPU set satisfies the request; the message is kubelet's."""


class NotEnoughCpusError(AllocationError):
    """Fewer CPUs are available than requested.

    Args:
        requested: the number of CPUs asked for.
        available: the number of CPUs offered (kubelet counts the set it was given).
    """

    def __init__(self, requested: int, available: int) -> None:
        self.requested = requested
        self.available = available
        super().__init__(
            "not enough cpus available to satisfy request: "
            f"requested={requested}, available={available}"
        )


class SMTAlignmentError(AllocationError):
    """``full-pcpus-only`` rejects the request (kubelet's ``SMTAlignmentError``).

    Args:
        requested_cpus: the number of CPUs asked for.
        cpus_per_core: the SMT level (``NumCPUs // NumCores``).
        available_physical_cpus: CPUs left once every sibling of a reserved CPU is excluded.
        caused_by_physical_cpus: ``True`` when the count was fine but too few whole cores are
            free, ``False`` when the count is not a multiple of the SMT level.
    """

    def __init__(
        self,
        requested_cpus: int,
        cpus_per_core: int,
        available_physical_cpus: int = 0,
        *,
        caused_by_physical_cpus: bool = False,
    ) -> None:
        self.requested_cpus = requested_cpus
        self.cpus_per_core = cpus_per_core
        self.available_physical_cpus = available_physical_cpus
        self.caused_by_physical_cpus = caused_by_physical_cpus
        if caused_by_physical_cpus:
            message = (
                "SMT Alignment Error: not enough free physical CPUs: "
                f"available physical CPUs = {available_physical_cpus}, "
                f"requested CPUs = {requested_cpus}, CPUs per core = {cpus_per_core}"
            )
        else:
            message = (
                f"SMT Alignment Error: requested {requested_cpus} cpus not multiple "
                f"cpus per core = {cpus_per_core}"
            )
        super().__init__(message)


# ======================================================================== public API


def take_packed(
    topo: CpuTopology,
    available: Iterable[int],
    n: int,
    prefer_uncore: bool = False,
    full_pcpus_only: bool = False,
    *,
    reserved: Iterable[int] = (),
) -> frozenset[int]:
    """Pick ``n`` CPUs the way kubelet's default static policy does (packed, best fit).

    Whole NUMA nodes/sockets first (the larger unit first), then, with ``prefer_uncore``,
    whole and partial uncore caches, then whole cores, then single threads from the emptiest
    places; see ``docs/cpu-allocation.md``.

    Args:
        topo: the whole machine (never just the free part: sizes come from it).
        available: the free CPUs to choose from (reserved CPUs already removed).
        n: how many CPUs to take; 0 gives the empty set.
        prefer_uncore: kubelet's ``prefer-align-cpus-by-uncorecache``.
        full_pcpus_only: kubelet's ``full-pcpus-only`` admission check (``n`` must be a multiple
            of the SMT level and fit in whole free cores once reserved siblings are excluded).
            The choice itself is the same packed algorithm, as in kubelet.
        reserved: the reserved CPUs, only used by the ``full_pcpus_only`` check.

    Returns:
        The chosen CPU ids.

    Raises:
        NotEnoughCpusError: fewer than ``n`` CPUs are available.
        SMTAlignmentError: ``full_pcpus_only`` rejects the request.
        AllocationError: kubelet's other failures (``failed to allocate cpus``).
        ValueError: ``n`` is negative.
    """
    free = _as_set(available)
    _check_count(n)
    if full_pcpus_only:
        check_full_pcpus_only(topo, free, n, reserved)
    return _take_packed(topo, free, n, spread=False, prefer_uncore=prefer_uncore)


def take_spread(topo: CpuTopology, available: Iterable[int], n: int) -> frozenset[int]:
    """Pick ``n`` CPUs the way kubelet does with ``distribute-cpus-across-cores``.

    The packed algorithm without the whole-core step, whose last step walks each socket's free
    CPUs in CPU-id order, so that (with Linux numbering) siblings are used last.

    Args:
        topo: the whole machine.
        available: the free CPUs to choose from.
        n: how many CPUs to take.

    Returns:
        The chosen CPU ids.

    Raises:
        NotEnoughCpusError: fewer than ``n`` CPUs are available.
        AllocationError: kubelet's other failures.
        ValueError: ``n`` is negative.
    """
    free = _as_set(available)
    _check_count(n)
    return _take_packed(topo, free, n, spread=True, prefer_uncore=False)


def take_distributed(
    topo: CpuTopology,
    available: Iterable[int],
    n: int,
    group_size: int | None = None,
    *,
    full_pcpus_only: bool = False,
    reserved: Iterable[int] = (),
) -> frozenset[int]:
    """Pick ``n`` CPUs the way kubelet does with ``distribute-cpus-across-numa``.

    Spreads the request evenly over the fewest NUMA nodes that can hold it, handing CPUs out
    in groups of ``group_size``, and falls back to :func:`take_packed` when no combination of
    NUMA nodes works or ``n`` is not a multiple of ``group_size``.

    Args:
        topo: the whole machine.
        available: the free CPUs to choose from.
        n: how many CPUs to take.
        group_size: kubelet's ``cpuGroupSize``. ``None`` means what kubelet uses: the SMT level
            when ``full_pcpus_only`` is set, else 1.
        full_pcpus_only: also apply kubelet's ``full-pcpus-only`` admission check.
        reserved: the reserved CPUs, only used by the ``full_pcpus_only`` check.

    Returns:
        The chosen CPU ids.

    Raises:
        NotEnoughCpusError: fewer than ``n`` CPUs are available.
        SMTAlignmentError: ``full_pcpus_only`` rejects the request.
        AllocationError: kubelet's other failures (including its ``accounting error``).
        ValueError: ``n`` is negative or ``group_size`` is below 1.
    """
    free = _as_set(available)
    _check_count(n)
    if group_size is None:
        group_size = topo.cpus_per_core() if full_pcpus_only else 1
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1 (got {group_size})")
    if full_pcpus_only:
        check_full_pcpus_only(topo, free, n, reserved)
    return _take_distributed(topo, free, n, group_size, spread=False)


# ======================================================================== checks


def _as_set(cpus: Iterable[int]) -> frozenset[int]:
    return cpus if isinstance(cpus, frozenset) else frozenset(cpus)


def _check_count(n: int) -> None:
    if n < 0:
        raise ValueError(f"cannot allocate a negative number of CPUs ({n})")


def check_full_pcpus_only(
    topo: CpuTopology, available: Iterable[int], n: int, reserved: Iterable[int] = ()
) -> None:
    """Run kubelet's ``full-pcpus-only`` admission checks (``staticPolicy.Allocate``).

    ``n`` must be a multiple of the SMT level (``NumCPUs // NumCores``), and no larger than the
    available CPUs once every SMT sibling of a reserved CPU is excluded (reserving half a core
    would otherwise let the packed algorithm hand out the other half).

    Args:
        topo: the whole machine.
        available: the free CPUs (reserved CPUs already removed).
        n: the whole request.
        reserved: the reserved CPUs.

    Raises:
        SMTAlignmentError: the request is rejected, with kubelet's message.
        AllocationError: the topology declares no cores.
    """
    available = _as_set(available)
    per_core = topo.cpus_per_core()
    if per_core < 1:
        raise AllocationError("topology declares no cores; cannot align to physical CPUs")
    if n % per_core != 0:
        raise SMTAlignmentError(n, per_core)
    # reservedPhysicalCPUs = reserved plus all their siblings; kubelet counts
    # defaultCPUSet - reservedPhysicalCPUs, which equals available - reservedPhysicalCPUs.
    reserved_physical: set[int] = set()
    for cpu in reserved:
        if cpu in topo.cpu_ids:
            reserved_physical |= topo.siblings(cpu)
        else:
            reserved_physical.add(cpu)
    physical = len(available - reserved_physical)
    if n > physical:
        raise SMTAlignmentError(n, per_core, physical, caused_by_physical_cpus=True)


# ======================================================================== accumulator


def _memoized(method: Callable[[_Accumulator], list[int]]) -> Callable[[_Accumulator], list[int]]:
    """Cache an ordering of the accumulator until its free set changes.

    Callers iterate the returned list and must not mutate it.
    """
    name = method.__name__

    def wrapper(self: _Accumulator) -> list[int]:
        cached = self._orders.get(name)
        if cached is None:
            cached = self._orders[name] = method(self)
        return cached

    wrapper.__name__ = name
    wrapper.__doc__ = method.__doc__
    return wrapper


def _ordered(ids: Iterable[int], free: Mapping[int, int]) -> list[int]:
    """Sort ids like kubelet ``cpuAccumulator.sort``: by free CPU count, then id."""
    return sorted(ids, key=lambda i: (free.get(i, 0), i))


class _Accumulator:
    """kubelet's ``cpuAccumulator``: the free CPUs (``details``), the result, the count left.

    Free counts per socket/NUMA node/core/uncore cache are kept up to date on every take so
    that the orderings are cheap; everything else is recomputed from the free set exactly
    where kubelet recomputes it.
    """

    __slots__ = (
        "_orders",
        "free",
        "free_core",
        "free_numa",
        "free_socket",
        "free_uncore",
        "infos",
        "need",
        "numa_first",
        "result",
        "spread",
        "topo",
    )

    def __init__(self, topo: CpuTopology, available: Collection[int], n: int, spread: bool) -> None:
        self.topo = topo
        self.infos = infos = topo.cpu_map
        self.free: set[int] = set(topo.cpu_ids.intersection(available))
        self.need = n
        self.result: set[int] = set()
        self.spread = spread
        self.numa_first = topo.numa_first
        free_infos = [infos[cpu] for cpu in self.free]
        self.free_socket: dict[int, int] = dict(Counter(map(_SOCKET, free_infos)))
        self.free_numa: dict[int, int] = dict(Counter(map(_NUMA, free_infos)))
        self.free_core: dict[int, int] = dict(Counter(map(_CORE, free_infos)))
        self.free_uncore: dict[int, int] = dict(Counter(map(_UNCORE, free_infos)))
        # Orderings depend only on the free set: memoized until the next take changes it.
        self._orders: dict[str, list[int]] = {}

    # ------------------------------------------------------------ bookkeeping

    def take(self, cpus: Collection[int]) -> None:
        """Port of kubelet ``take``: add to the result, drop from the free set, count them as taken.

        Like kubelet this counts every CPU passed, even one already taken or never free.
        """
        self.result.update(cpus)
        for cpu in cpus:
            if cpu in self.free:
                self._orders.clear()
                self.free.remove(cpu)
                info = self.infos[cpu]
                _bump(self.free_socket, info.socket_id, -1)
                _bump(self.free_numa, info.numa_node, -1)
                _bump(self.free_core, info.core_id, -1)
                _bump(self.free_uncore, info.uncore_cache_id, -1)
        self.need -= len(cpus)

    def needs_at_least(self, count: int) -> bool:
        return self.need >= count

    def is_satisfied(self) -> bool:
        return self.need < 1

    def is_failed(self) -> bool:
        return self.need > len(self.free)

    def free_cpus_in_numa(self, numa: int) -> frozenset[int]:
        return self.topo.cpus_in_numa_node(numa).intersection(self.free)

    # ------------------------------------------------------------ groupings of the free set

    def _group(self, outer: _Key, inner: _Key) -> dict[int, set[int]]:
        """Group the free CPUs: ``outer(cpu) -> {inner(cpu), ...}`` (kubelet's ``...InX``)."""
        grouped: dict[int, set[int]] = {}
        infos = self.infos
        for cpu in self.free:
            info = infos[cpu]
            key = outer(info)
            members = grouped.get(key)
            if members is None:
                grouped[key] = {inner(info)}
            else:
                members.add(inner(info))
        return grouped

    def _per_parent(
        self,
        parents: Iterable[int],
        outer: _Key,
        inner: _Key,
        order: Callable[[Iterable[int]], list[int]],
    ) -> list[int]:
        """The free ``inner`` units of each ``outer`` parent, parents in the order given."""
        children = self._group(outer, inner)
        return [unit for parent in parents for unit in order(children.get(parent, ()))]

    # ------------------------------------------------------------ orderings (sortAvailable*)

    @_memoized
    def numa_order(self) -> list[int]:
        """NUMA nodes with a free CPU, in kubelet's ``sortAvailableNUMANodes`` order."""
        free = self.free_numa
        if self.numa_first:
            return _ordered(free, free)
        return self._per_parent(self.socket_order(), _SOCKET, _NUMA, lambda u: _ordered(u, free))

    @_memoized
    def socket_order(self) -> list[int]:
        """Sockets with a free CPU, in kubelet's ``sortAvailableSockets`` order."""
        free = self.free_socket
        if not self.numa_first:
            return _ordered(free, free)
        return self._per_parent(self.numa_order(), _NUMA, _SOCKET, lambda u: _ordered(u, free))

    @_memoized
    def core_order(self) -> list[int]:
        """Cores with a free CPU, in kubelet's ``sortAvailableCores`` order.

        A core id present in several parents (sockets or NUMA nodes) appears once per parent,
        as in kubelet.
        """
        free = self.free_core
        if self.numa_first:
            return self._per_parent(
                self.socket_order(), _SOCKET, _CORE, lambda u: _ordered(u, free)
            )
        return self._per_parent(self.numa_order(), _NUMA, _CORE, lambda u: _ordered(u, free))

    @_memoized
    def uncore_order(self) -> list[int]:
        """Uncore caches in kubelet's ``sortAvailableUncoreCaches`` order (per NUMA node)."""
        free = self.free_uncore
        return self._per_parent(self.numa_order(), _NUMA, _UNCORE, lambda u: _ordered(u, free))

    @_memoized
    def cpu_order(self) -> list[int]:
        """Free CPUs in kubelet's ``sortAvailableCPUsPacked``/``...Spread`` order."""
        if self.spread:
            return self._per_parent(self.socket_order(), _SOCKET, _CPU, sorted)
        return self._per_parent(self.core_order(), _CORE, _CPU, sorted)

    # ------------------------------------------------------------ free units (free*)

    def free_numa_nodes(self) -> list[int]:
        topo = self.topo
        return _all_free(
            self.numa_order(), self.free_numa, lambda n: len(topo.cpus_in_numa_node(n))
        )

    def free_sockets(self) -> list[int]:
        per_socket = self.topo.cpus_per_socket()
        return _all_free(self.socket_order(), self.free_socket, lambda _: per_socket)

    def free_uncore_caches(self) -> list[int]:
        topo = self.topo
        return _all_free(
            self.uncore_order(), self.free_uncore, lambda u: len(topo.cpus_in_uncore_cache(u))
        )

    def free_cores(self) -> list[int]:
        per_core = self.topo.cpus_per_core()
        return _all_free(self.core_order(), self.free_core, lambda _: per_core)

    # ------------------------------------------------------------ take* steps

    def _take_whole(
        self, units: Iterable[int], cpus_of: Callable[[int], Collection[int]], step: str, what: str
    ) -> None:
        """Kubelet's ``takeFull*`` steps: take each free unit whole while the request needs it."""
        for unit in units:
            cpus = cpus_of(unit)
            if not self.needs_at_least(len(cpus)):
                continue
            logger.debug("%s: claiming %s %d", step, what, unit)
            self.take(cpus)

    def take_full_numa_nodes(self) -> None:
        self._take_whole(
            self.free_numa_nodes(), self.topo.cpus_in_numa_node, "takeFullNUMANodes", "NUMA node"
        )

    def take_full_sockets(self) -> None:
        self._take_whole(self.free_sockets(), self.topo.cpus_in_socket, "takeFullSockets", "socket")

    def take_full_first_level(self) -> None:
        if self.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_full_second_level(self) -> None:
        if self.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    def take_full_uncore(self) -> None:
        self._take_whole(
            self.free_uncore_caches(), self.topo.cpus_in_uncore_cache, "takeFullUncore", "uncore"
        )

    def take_partial_uncore(self, uncore: int) -> None:
        per_core = self.topo.cpus_per_core()
        cores_needed = (self.need + per_core - 1) // per_core
        # CoresNeededInUncoreCache: the lowest core ids with a free CPU in this uncore cache.
        topo = self.topo
        free = self.free
        cores = sorted(
            {self.infos[cpu].core_id for cpu in topo.cpus_in_uncore_cache(uncore) if cpu in free}
        )[:cores_needed]
        # CPUsInCores over the free CPUs: every free thread of those cores, whatever its cache.
        cpus = {cpu for core in cores for cpu in topo.cpus_in_core(core) if cpu in free}
        if self.need % 2 != 0 and per_core > 1:
            ordered = sorted(cpus)
            if len(ordered) > self.need:
                ordered = ordered[: len(cpus) - 1]
            cpus = set(ordered)
        claimed = self.need == len(cpus)
        logger.debug(
            "takePartialUncore: uncore %d claimed=%s needed=%d cpus=%s",
            uncore,
            claimed,
            self.need,
            format_cpulist(cpus),
        )
        if claimed:
            self.take(cpus)

    def take_uncore_cache(self) -> None:
        per_uncore = self.topo.cpus_per_uncore()
        for uncore in self.uncore_order():
            if self.needs_at_least(per_uncore):
                self.take_full_uncore()
            if self.is_satisfied():
                return
            self.take_partial_uncore(uncore)
            if self.is_satisfied():
                return

    def take_full_cores(self) -> None:
        self._take_whole(self.free_cores(), self.topo.cpus_in_core, "takeFullCores", "core")

    def take_remaining_cpus(self) -> None:
        for cpu in self.cpu_order():
            self.take((cpu,))
            if self.is_satisfied():
                return

    def range_numa_nodes_needed(self, group_size: int) -> tuple[int, int]:
        """Port of kubelet ``rangeNUMANodesNeededToSatisfy``: (min, max) NUMA nodes."""
        num_numa = len(self.topo.numa_nodes())
        num_numa_available = len(self.free_numa)
        num_cpus = len(self.topo.cpu_ids)
        groups = (num_cpus - 1) // group_size + 1
        groups_per_numa = (groups - 1) // num_numa + 1
        groups_needed = (self.need - 1) // group_size + 1
        min_numas = (groups_needed - 1) // groups_per_numa + 1
        max_numas = min(groups_needed, num_numa_available)
        return min_numas, max_numas


def _all_free(
    order: Iterable[int], free: Mapping[int, int], size: Callable[[int], int]
) -> list[int]:
    """The units of ``order`` whose CPUs (``size`` of them) are all free (kubelet's ``free*``)."""
    return [unit for unit in order if free.get(unit, 0) == size(unit)]


def _bump(counts: dict[int, int], key: int, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value:
        counts[key] = value
    else:
        del counts[key]


# ======================================================================== packed


def _take_packed(
    topo: CpuTopology, available: frozenset[int], n: int, *, spread: bool, prefer_uncore: bool
) -> frozenset[int]:
    """Port of kubelet ``takeByTopologyNUMAPacked``."""
    acc = _Accumulator(topo, available, n, spread)
    if acc.is_satisfied():
        return _EMPTY
    if acc.is_failed():
        raise NotEnoughCpusError(n, len(available))

    acc.take_full_first_level()
    if acc.is_satisfied():
        return frozenset(acc.result)
    acc.take_full_second_level()
    if acc.is_satisfied():
        return frozenset(acc.result)
    if prefer_uncore:
        acc.take_uncore_cache()
        if acc.is_satisfied():
            return frozenset(acc.result)
    if not spread:
        acc.take_full_cores()
        if acc.is_satisfied():
            return frozenset(acc.result)
    acc.take_remaining_cpus()
    if acc.is_satisfied():
        return frozenset(acc.result)
    raise AllocationError("failed to allocate cpus")


def _take_packed_or_empty(
    topo: CpuTopology, available: frozenset[int], n: int, spread: bool
) -> frozenset[int]:
    """The packed calls inside the distributed algorithm, whose errors kubelet discards."""
    try:
        return _take_packed(topo, available, n, spread=spread, prefer_uncore=False)
    except AllocationError:
        return _EMPTY


# ======================================================================== distributed


class _GoSlice:
    """A Go ``[]int`` slice header: a shared backing array and a length.

    kubelet's ``iterateCombinations`` builds each combination with ``append(accum, n[i])``;
    once the backing array has spare capacity, sibling combinations are written into the same
    array, so a combination kept from an earlier callback (``bestCombo``, ``bestRemainder``)
    can change afterwards. Reproducing that aliasing is required for parity with kubelet
    (see kubernetes PR #141238, not merged at the pinned commit).
    """

    __slots__ = ("array", "length")

    def __init__(self, array: list[int], length: int) -> None:
        self.array = array
        self.length = length

    def values(self) -> list[int]:
        return self.array[: self.length]

    def append(self, value: int) -> _GoSlice:
        """Go ``append(s, value)`` for an ``[]int`` (growslice: double below 256 elements)."""
        if self.length < len(self.array):
            self.array[self.length] = value
            return _GoSlice(self.array, self.length + 1)
        old_cap = len(self.array)
        needed = self.length + 1
        if needed > 2 * old_cap:
            new_cap = needed
        elif old_cap < 256:  # noqa: PLR2004 - Go's growslice threshold
            new_cap = 2 * old_cap
        else:
            new_cap = old_cap
            while new_cap < needed:
                new_cap += (new_cap + 3 * 256) >> 2
        array = [*self.array[: self.length], value]
        array.extend([0] * (new_cap - len(array)))
        return _GoSlice(array, needed)


def _iterate_combinations(items: Sequence[int], k: int, visit: Callable[[_GoSlice], bool]) -> None:
    """Port of kubelet ``iterateCombinations``: k-subsets in lexicographic order of ``items``.

    ``visit`` returns ``True`` to stop (Go's ``Break``). Combinations are Go slices with Go's
    aliasing (see :class:`_GoSlice`).
    """
    if k < 1:
        return

    def helper(remaining: int, start: int, accum: _GoSlice) -> bool:
        if remaining == 0:
            return visit(accum)
        for i in range(start, len(items) - remaining + 1):
            if helper(remaining - 1, i + 1, accum.append(items[i])):
                return True
        return False

    helper(k, 0, _GoSlice([], 0))


def _go_round(value: float) -> float:
    """Go ``math.Round``: half away from zero."""
    truncated = math.trunc(value)
    if abs(value - truncated) >= 0.5:  # noqa: PLR2004 - half
        truncated += 1 if value > 0 else -1
    return float(truncated)


def _mean(values: Sequence[int]) -> float:
    total = 0.0
    for value in values:
        total += float(value)
    return _go_round(total / len(values) * 1000) / 1000


def _standard_deviation(values: Sequence[int]) -> float:
    """Port of kubelet ``standardDeviation`` (population; mean and result rounded to 3 places)."""
    mean = _mean(values)
    total = 0.0
    for value in values:
        total += (float(value) - mean) * (float(value) - mean)
    return _go_round(math.sqrt(total / len(values)) * 1000) / 1000


class _Best:
    """The best NUMA combination found so far for one combination size."""

    __slots__ = ("balance", "combo", "remainder")

    def __init__(self) -> None:
        self.balance = math.inf
        self.combo: _GoSlice | None = None
        self.remainder: _GoSlice | None = None


def _take_distributed(
    topo: CpuTopology, available: frozenset[int], n: int, group_size: int, *, spread: bool
) -> frozenset[int]:
    """Port of kubelet ``takeByTopologyNUMADistributed``."""
    if n % group_size != 0:
        return _take_packed(topo, available, n, spread=spread, prefer_uncore=False)

    acc = _Accumulator(topo, available, n, spread)
    if acc.is_satisfied():
        return _EMPTY
    if acc.is_failed():
        raise NotEnoughCpusError(n, len(available))

    numas = acc.numa_order()
    min_numas, max_numas = acc.range_numa_nodes_needed(group_size)
    free_numa = acc.free_numa

    for k in range(min_numas, max_numas + 1):
        best = _Best()

        def visit_combo(combo_slice: _GoSlice, best: _Best = best) -> bool:
            if best.balance == 0:
                return True
            combo = combo_slice.values()
            if sum(free_numa.get(numa, 0) for numa in set(combo)) < n:
                return False
            groups = sum(free_numa.get(numa, 0) // group_size for numa in combo)
            if groups * group_size < n:
                return False
            distribution = (n // len(combo) // group_size) * group_size
            if any(free_numa.get(numa, 0) < distribution for numa in combo):
                return False
            after = {numa: free_numa.get(numa, 0) for numa in numas}
            for numa in combo:
                after[numa] -= distribution
            remainder = n - distribution * len(combo)
            remainder_combo = [numa for numa in combo if after[numa] >= group_size]

            local_balance = math.inf
            local_remainder: _GoSlice | None = None
            if remainder == 0:
                local_balance = _standard_deviation(list(after.values()))
            else:
                for size in range(len(remainder_combo), 0, -1):
                    found = _best_remainder_subset(
                        remainder_combo,
                        size=size,
                        after=after,
                        remainder=remainder,
                        group_size=group_size,
                        best_balance=local_balance,
                    )
                    if found is not None:
                        local_balance, local_remainder = found
            if local_balance < best.balance:
                best.balance = local_balance
                best.remainder = local_remainder
                best.combo = combo_slice
            return False

        _iterate_combinations(numas, k, visit_combo)
        if best.combo is None:
            continue
        return _allocate_combo(acc, best, n, group_size, spread)

    return _take_packed(topo, available, n, spread=spread, prefer_uncore=False)


def _best_remainder_subset(
    remainder_combo: Sequence[int],
    *,
    size: int,
    after: Mapping[int, int],
    remainder: int,
    group_size: int,
    best_balance: float,
) -> tuple[float, _GoSlice] | None:
    """The remainder subsets of one size, scored as kubelet scores them.

    Returns the new best ``(balance, subset)`` if a subset of this size beats ``best_balance``
    (strictly), else ``None``.
    """
    found: list[tuple[float, _GoSlice]] = []
    current = best_balance

    def visit_subset(subset_slice: _GoSlice) -> bool:
        nonlocal current
        subset = subset_slice.values()
        left = dict(after)
        pending = remainder
        if sum(left[numa] for numa in subset) < pending:
            return False
        while pending > 0:
            progressed = False
            for numa in subset:
                if pending == 0:
                    break
                if left[numa] < group_size:
                    continue
                left[numa] -= group_size
                pending -= group_size
                progressed = True
            if not progressed:
                # kubelet at the pinned commit loops forever here (fixed upstream by
                # kubernetes PR #140730, which skips such subsets); skip it as well.
                return False
        balance = _standard_deviation(list(left.values()))
        if balance < current:
            current = balance
            found.append((balance, subset_slice))
        return False

    _iterate_combinations(remainder_combo, size, visit_subset)
    return found[-1] if found else None


def _allocate_combo(
    acc: _Accumulator, best: _Best, n: int, group_size: int, spread: bool
) -> frozenset[int]:
    """The allocation half of ``takeByTopologyNUMADistributed`` for the chosen combination."""
    assert best.combo is not None  # noqa: S101 - caller guarantees it
    combo = best.combo.values()  # read now: Go aliasing may have rewritten it
    topo = acc.topo
    distribution = (n // len(combo) // group_size) * group_size
    logger.debug(
        "takeByTopologyNUMADistributed: bestCombo=%s distribution=%d bestRemainder=%s",
        combo,
        distribution,
        best.remainder.values() if best.remainder is not None else [],
    )
    for numa in combo:
        acc.take(_take_packed_or_empty(topo, acc.free_cpus_in_numa(numa), distribution, spread))

    remainder = n - distribution * len(combo)
    remainder_numas = best.remainder.values() if best.remainder is not None else []
    while remainder > 0:
        progressed = False
        for numa in remainder_numas:
            if remainder == 0:
                break
            free = acc.free_cpus_in_numa(numa)
            if len(free) < group_size:
                continue
            acc.take(_take_packed_or_empty(topo, free, group_size, spread))
            remainder -= group_size
            progressed = True
        if not progressed:
            # kubelet would loop forever; report its accounting error instead.
            break

    if acc.need > 0:
        raise AllocationError(f"accounting error, not enough CPUs allocated, remaining: {acc.need}")
    if acc.need < 0:
        raise AllocationError(f"accounting error, too many CPUs allocated, remaining: {acc.need}")
    return frozenset(acc.result)
