"""kubelet static-policy golden cases, run through the allocator with the policy glue.

Ported from kubernetes ``pkg/kubelet/cm/cpumanager/policy_static_test.go``:
``TestStaticPolicyAdd`` (the allocation cases: options-insensitive ones under both option sets,
the default-options ones and the ``full-pcpus-only`` ones, plus align-by-socket),
``TestTopologyAwareAllocateCPUs`` and ``TestStaticPolicyAddWithUncoreAlignment``. Cases that
test pod QoS classification or state bookkeeping rather than CPU choice (non-Guaranteed pods,
non-integer requests, re-adding an already assigned container) are not allocator behaviour and
are left out.

:class:`StaticPolicy` below is the part of ``policy_static.go`` these tests go through
(``NewStaticPolicy`` reservation, ``Allocate``'s ``full-pcpus-only`` checks, ``allocateCPUs``
with a NUMA hint, ``takeByTopology``'s choice of algorithm), written on top of the public
allocator API. It exists for the tests; the plugin owns the real glue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pytest

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit_cpu.allocator import (
    AllocationError,
    check_full_pcpus_only,
    take_distributed,
    take_packed,
    take_spread,
)
from drakit_cpu.topology import CpuTopology

TopologyLookup = Callable[[str], CpuTopology]


@dataclass(frozen=True)
class Options:
    """The kubelet ``cpuManagerPolicyOptions`` the allocator distinguishes."""

    full_pcpus_only: bool = False
    prefer_uncore: bool = False
    distribute_across_numa: bool = False
    distribute_across_cores: bool = False
    align_by_socket: bool = False


class StaticPolicy:
    """Test double of kubelet's ``staticPolicy``, allocation path only.

    Args:
        topo: the machine.
        options: the policy options.
        num_reserved: ``numReservedCPUs``; used when ``reserved`` is empty.
        reserved: ``reservedSystemCPUs``.
    """

    def __init__(
        self,
        topo: CpuTopology,
        options: Options,
        num_reserved: int = 0,
        reserved: Iterable[int] = (),
    ) -> None:
        self.topo = topo
        self.options = options
        explicit = frozenset(reserved)
        self.reserved = explicit or self.take_by_topology(topo.cpu_ids, num_reserved)
        assert len(self.reserved) == (len(explicit) if explicit else num_reserved)

    def take_by_topology(self, available: frozenset[int], n: int) -> frozenset[int]:
        """``staticPolicy.takeByTopology``: the algorithm the options select."""
        if self.options.distribute_across_numa:
            group = self.topo.cpus_per_core() if self.options.full_pcpus_only else 1
            return take_distributed(self.topo, available, n, group)
        if self.options.distribute_across_cores:
            return take_spread(self.topo, available, n)
        return take_packed(self.topo, available, n, prefer_uncore=self.options.prefer_uncore)

    def allocate(
        self, default: frozenset[int], n: int, numa_hint: Sequence[int] | None = None
    ) -> frozenset[int]:
        """``Allocate`` + ``allocateCPUs`` for one container from the shared ``default`` set."""
        available = default - self.reserved
        if self.options.full_pcpus_only:
            check_full_pcpus_only(self.topo, available, n, self.reserved)
        result: frozenset[int] = frozenset()
        if numa_hint is not None:
            aligned = self._aligned(numa_hint, available)
            result = self.take_by_topology(aligned, min(n, len(aligned)))
        return result | self.take_by_topology(available - result, n - len(result))

    def _aligned(self, numa_hint: Sequence[int], available: frozenset[int]) -> frozenset[int]:
        topo = self.topo
        if self.options.align_by_socket:
            sockets = {s for numa in numa_hint for s in topo.sockets_in_numa_node(numa)}
            return frozenset().union(*(available & topo.cpus_in_socket(s) for s in sockets))
        return frozenset().union(*(available & topo.cpus_in_numa_node(n) for n in numa_hint))


# ---------------------------------------------------------------- TestStaticPolicyAdd


@dataclass(frozen=True)
class AddCase:
    """A ``TestStaticPolicyAdd`` row; ``error`` is the expected message, else ``expected``."""

    description: str
    topo: str
    num_reserved: int
    default: str
    n: int
    expected: str = ""
    error: str = ""
    reserved: str = ""
    numa_hint: tuple[int, ...] | None = None


def _quad_default(topo: CpuTopology, spec: str) -> frozenset[int]:
    """The quad-socket defaults upstream builds from per-socket sets: ``"all-<list>"`` etc."""
    if spec.startswith("all-"):
        return topo.cpu_ids - parse_cpulist(spec[4:])
    if spec.startswith("sock1+"):
        return topo.cpus_in_socket(1) | parse_cpulist(spec[6:])
    return parse_cpulist(spec)


# fmt: off
OPTIONS_INSENSITIVE_CASES = [
    AddCase("GuPodMultipleCores, SingleSocketHT, ExpectAllocOneCore",
            "topoSingleSocketHT", 1, "0,1,4,5", 2, "1,5"),
    AddCase("GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocket",
            "topoDualSocketHT", 1, "0,1,3-11", 6, "1,3,5,7,9,11"),
    AddCase("GuPodMultipleCores, DualSocketHT, ExpectAllocThreeCores",
            "topoDualSocketHT", 1, "0,2,3,4,6-11", 6, "2,3,4,8,9,10"),
    AddCase("GuPodMultipleCores, DualSocketNoHT, ExpectAllocOneSocket",
            "topoDualSocketNoHT", 1, "0,1,3-7", 4, "4-7"),
    AddCase("GuPodMultipleCores, DualSocketNoHT, ExpectAllocFourCores",
            "topoDualSocketNoHT", 1, "0,1,3,6,7", 4, "1,3,6,7"),
    AddCase("GuPodMultipleCores, DualSocketHT, ExpectAllocOneSocketOneCore",
            "topoDualSocketHT", 1, "0,1,3-11", 8, "1,3,4,5,7,9,10,11"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocSock0",
            "topoQuadSocketFourWayHT", 0, "all-3,11,4,5,6,7", 72, "sock0"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllFullCoresFromThreeSockets",
            "topoQuadSocketFourWayHT", 0, "1,25,13,38,2,9,11,35,23,48,12,51,53,173,113,233,54,61",
            12, "1,25,13,38,11,35,23,48,53,173,113,233"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocAllSock1+FullCore",
            "topoQuadSocketFourWayHT", 0, "sock1+10,34,22,47,53,173,61,181,108,228,115,235",
            76, "sock1+10,34,22,47"),
]

DEFAULT_OPTIONS_CASES = [
    AddCase("GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            "topoSingleSocketHT", 1, "0-7", 1, "4"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocCPUs",
            "topoQuadSocketFourWayHT", 0, "10,11,53,67,52", 5, "10,11,53,67,52"),
    AddCase("GuPodSingleCore, SingleSocketHT, ExpectError",
            "topoSingleSocketHT", 1, "0-7", 8,
            error="not enough cpus available to satisfy request: requested=8, available=7"),
    AddCase("GuPodMultipleCores, DualSocketHT, NoAllocExpectError",
            "topoDualSocketHT", 1, "0,4-11", 10,
            error="not enough cpus available to satisfy request: requested=10, available=8"),
    AddCase("GuPodMultipleCores, SingleSocketHT, NoAllocExpectError",
            "topoSingleSocketHT", 1, "0,7", 2,
            error="not enough cpus available to satisfy request: requested=2, available=1"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, NoAlloc",
            "topoQuadSocketFourWayHT", 0, "10,11,53,37,55,67,52", 76,
            error="not enough cpus available to satisfy request: requested=76, available=7"),
]

FULL_PCPUS_ONLY_CASES = [
    AddCase("GuPodSingleCore, SingleSocketHT, ExpectAllocOneCPU",
            "topoSingleSocketHT", 1, "0-7", 1,
            error="SMT Alignment Error: requested 1 cpus not multiple cpus per core = 2"),
    AddCase("GuPodMultipleCores, topoQuadSocketFourWayHT, ExpectAllocOneCPUs",
            "topoQuadSocketFourWayHT", 8, "all-", 15,
            error="SMT Alignment Error: requested 15 cpus not multiple cpus per core = 4"),
    AddCase("GuPodManyCores, topoDualSocketHT, ExpectDoNotAllocPartialCPU",
            "topoDualSocketHT", 2, "0,2-5,7-11", 10, reserved="1,6",
            error="SMT Alignment Error: not enough free physical CPUs: available physical "
                  "CPUs = 8, requested CPUs = 10, CPUs per core = 2"),
    AddCase("GuPodManyCores, topoDualSocketHT, AutoReserve, ExpectAllocAllCPUs",
            "topoDualSocketHT", 2, "1-5,7-11", 10, "1-5,7-11"),
    AddCase("GuPodManyCores, topoDualSocketHT, ExpectAllocAllCPUs",
            "topoDualSocketHT", 2, "1-5,7-11", 10, "1-5,7-11", reserved="0,6"),
]

ALIGN_BY_SOCKET_CASES = [
    AddCase("Align by socket: true, cpu's within same socket of numa in hint are part of "
            "allocation",
            "topoDualSocketMultiNumaPerSocketHT", 1, "2,11,21,22", 2, "2,11", numa_hint=(0, 2)),
    AddCase("Align by socket: false, cpu's are taken strictly from NUMA nodes in hint",
            "topoDualSocketMultiNumaPerSocketHT", 1, "2,11,21,22", 2, "2,21", numa_hint=(0, 2)),
]
# fmt: on


def _expected_cpus(topo: CpuTopology, spec: str) -> frozenset[int]:
    if spec == "sock0":
        return topo.cpus_in_socket(0)
    if spec.startswith("sock1+"):
        return topo.cpus_in_socket(1) | parse_cpulist(spec[6:])
    return parse_cpulist(spec)


def _run_add(topo: CpuTopology, case: AddCase, options: Options) -> None:
    policy = StaticPolicy(topo, options, case.num_reserved, parse_cpulist(case.reserved))
    default = _quad_default(topo, case.default)
    if case.error:
        with pytest.raises(AllocationError) as excinfo:
            policy.allocate(default, case.n, case.numa_hint)
        assert str(excinfo.value) == case.error
        return
    got = policy.allocate(default, case.n, case.numa_hint)
    assert format_cpulist(got) == format_cpulist(_expected_cpus(topo, case.expected))


@pytest.mark.parametrize(
    ("case", "options"),
    [
        pytest.param(c, o, id=f"options={label} {c.description}")
        for label, o in (
            ("map[]", Options()),
            ("map[full-pcpus-only:true]", Options(full_pcpus_only=True)),
        )
        for c in OPTIONS_INSENSITIVE_CASES
    ],
)
def test_static_policy_add_options_insensitive(
    upstream_topology: TopologyLookup, case: AddCase, options: Options
) -> None:
    _run_add(upstream_topology(case.topo), case, options)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.description) for c in DEFAULT_OPTIONS_CASES])
def test_static_policy_add_default_options(
    upstream_topology: TopologyLookup, case: AddCase
) -> None:
    _run_add(upstream_topology(case.topo), case, Options())


@pytest.mark.parametrize("case", [pytest.param(c, id=c.description) for c in FULL_PCPUS_ONLY_CASES])
def test_static_policy_add_full_pcpus_only(
    upstream_topology: TopologyLookup, case: AddCase
) -> None:
    _run_add(upstream_topology(case.topo), case, Options(full_pcpus_only=True))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.description) for c in ALIGN_BY_SOCKET_CASES])
def test_static_policy_add_align_by_socket(
    upstream_topology: TopologyLookup, case: AddCase
) -> None:
    options = Options(align_by_socket=case.description.startswith("Align by socket: true"))
    _run_add(upstream_topology(case.topo), case, options)


# ---------------------------------------------------------------- TestTopologyAwareAllocateCPUs


@pytest.mark.parametrize(
    ("numa_hint", "n", "expected"),
    [
        pytest.param(None, 2, "0,6", id="Request 2 CPUs, No BitMask"),
        pytest.param((0,), 2, "0,6", id="Request 2 CPUs, BitMask on Socket 0"),
        pytest.param((1,), 2, "1,7", id="Request 2 CPUs, BitMask on Socket 1"),
        pytest.param((0,), 8, "0,6,2,8,4,10,1,7", id="Request 8 CPUs, BitMask on Socket 0"),
        pytest.param((1,), 8, "1,7,3,9,5,11,0,6", id="Request 8 CPUs, BitMask on Socket 1"),
    ],
)
def test_topology_aware_allocate_cpus(
    upstream_topology: TopologyLookup, numa_hint: tuple[int, ...] | None, n: int, expected: str
) -> None:
    topo = upstream_topology("topoDualSocketHT")
    policy = StaticPolicy(topo, Options())
    got = policy.allocate(topo.cpu_ids, n, numa_hint)
    assert format_cpulist(got) == format_cpulist(parse_cpulist(expected))


# ---------------------------------------------------------------- uncore alignment


@dataclass(frozen=True)
class UncoreCase:
    """A ``TestStaticPolicyAddWithUncoreAlignment`` row (prefer-align-cpus-by-uncorecache on).

    The shared pool is all CPUs of ``default_topo`` (``topo`` when empty) minus the CPUs of
    ``minus_uncores`` and of ``minus``; containers are allocated in order. Upstream checks
    either the first container's CPUs (``expected_cpus``) or the uncore caches the whole pod
    landed in (``expected_uncores``).
    """

    description: str
    topo: str
    reserved: str
    containers: tuple[int, ...]
    full_pcpus_only: bool = True
    minus_uncores: tuple[int, ...] = ()
    minus: str = ""
    default_topo: str = ""
    expected_uncores: str = ""
    expected_cpus: str = ""


_EPYC_9654 = "topoDualSocketSingleNumaPerSocketSMTUncore"
_EPYC_7702P = "topoSingleSocketSingleNumaPerSocketSMTSmallUncore"
_EPYC_7702P_NOSMT = "topoSingleSocketSingleNumaPerSocketNoSMTSmallUncore"
_EPYC_7303_NOSMT = "topoSmallDualSocketSingleNumaPerSocketNoSMTUncore"
_EPYC_9754 = "topoLargeSingleSocketSingleNumaPerSocketSMTUncore"
_EPYC_9654_NPS2 = "topoDualSocketMultiNumaPerSocketUncore"
_XEON_8490H = "topoDualSocketSubNumaPerSocketHTMonolithicUncore"
_I7_12850HX = "topoSingleSocketSingleNumaPerSocketPCoreHTMonolithicUncore"
_ALTRA = "topoLargeSingleSocketSingleNumaPerSocketUncore"
_GRAVITON3 = "topoSingleSocketSingleNumaPerSocketUncore"
_SMALL_NOSMT = "topoSmallSingleSocketSingleNumaPerSocketNoSMTUncore"

_RESERVED_9654 = "0,1,96,97,192,193,288,289"

# fmt: off
UNCORE_CASES = [
    UncoreCase("GuPodSingleContainerSaturating, DualSocketHTUncore, ExpectAllocOneUncore, "
               "FullUncoreAvail",
               _EPYC_9654, _RESERVED_9654, (16,), minus_uncores=(0, 12), expected_uncores="1"),
    UncoreCase("GuPodMainAndSidecarContainer, DualSocketHTUncore, ExpectAllocOneUncore, "
               "FullUncoreAvail",
               _EPYC_9654, _RESERVED_9654, (12, 2), minus_uncores=(0, 12), expected_uncores="1"),
    UncoreCase("GuPodSidecarAndMainContainer, DualSocketHTUncore, ExpectAllocOneUncore, "
               "FullUncoreAvail",
               _EPYC_9654, _RESERVED_9654, (2, 12), minus_uncores=(0, 12), expected_uncores="1"),
    UncoreCase("GuPodMainAndManySidecarContainer, DualSocketHTUncore, ExpectAllocOneUncore, "
               "FullUncoreAvail",
               _EPYC_9654, _RESERVED_9654, (10, 2, 2, 2), minus_uncores=(0, 12),
               expected_uncores="1"),
    UncoreCase("GuPodMainAndSidecarContainer, DualSocketHTUncore, ExpectAllocTwoUncore",
               _EPYC_9654, _RESERVED_9654, (12, 2), expected_uncores="0,1"),
    UncoreCase("GuPodSingleContainer, SingleSocketSMTSmallUncore, ExpectAllocOneUncore",
               _EPYC_7702P, "0,1,64,65", (8,), expected_uncores="1"),
    UncoreCase("GuPodSingleContainer, SingleSocketSMTSmallUncore, ExpectAllocTwoUncore",
               _EPYC_7702P, "0,1,64,65", (12,), minus_uncores=(1,), expected_uncores="0,2"),
    UncoreCase("GuPodSingleContainer, SingleSocketNoSMTSmallUncore, FragmentedUncore, "
               "ExpectAllocThreeUncore",
               _EPYC_7702P_NOSMT, "0-3", (12,), minus_uncores=(2, 3, 5), expected_uncores="1,4,6"),
    UncoreCase("GuPodMultiContainer, DualSocketSMTUncore, FragmentedUncore, ExpectAllocOneUncore",
               _EPYC_7303_NOSMT, "0,1,32,33", (4, 2), minus_uncores=(1,), expected_uncores="0"),
    UncoreCase("GuPodMultiContainer, DualSocketSMTUncore, FragmentedUncore, ExpectAllocTwoUncore",
               _EPYC_7303_NOSMT, "0,1,32,33", (4, 4), minus_uncores=(1,), expected_uncores="0,2"),
    UncoreCase("GuPodMultiContainer, LargeSingleSocketSMTUncore, PartialUncoreFit, "
               "ExpectAllocTwoUncore",
               _EPYC_9754, "0,1,128,129", (12, 12), minus="8,9,136,137", expected_uncores="0,1"),
    UncoreCase("GuPodMultiContainer, LargeSingleSocketSMTUncore, PartialUncoreNoFit, "
               "ExpectAllocTwoUncore",
               _EPYC_9754, "0,1,128,129", (14, 14), minus="8,9,136,137", expected_uncores="2,3"),
    UncoreCase("GuPodLargeSingleContainer, DualSocketNoSMTUncore, FullNUMAsAvail, "
               "ExpectAllocFullNUMA",
               _EPYC_9654_NPS2, "0-3", (48,), expected_uncores="6-11"),
    UncoreCase("GuPodSingleContainer, MonoUncoreCacheHT, ExpectAllocCPUSet",
               _XEON_8490H, "0,1,120,121", (6,), expected_cpus="2,3,4,122,123,124"),
    UncoreCase("GuPodSingleContainer, MonoUncoreCacheHT, ExpectAllocCPUSet (repeated: "
               "fragmented P-core/E-core monolithic cache)",
               _I7_12850HX, "0,1", (6,), minus="4-7", expected_cpus="2,3,8,9,16,17"),
    UncoreCase("GuPodSingleContainer, LargeSingleSocketUncore, ExpectAllocOneUncore",
               _ALTRA, "0-3", (8,), expected_uncores="1"),
    UncoreCase("GuPodSingleContainer, MonoUncoreCacheHT, ExpectFragmentedAllocCPUSet",
               _GRAVITON3, "0,1", (12,), minus="6-9,12-15,18,19",
               expected_cpus="2,3,4,5,10,11,16,17,20,21,22,23"),
    UncoreCase("GuPodSingleContainer, SingleSocketUncore, PartialUncore, "
               "ExpectBestEffortAllocTwoUncore",
               _SMALL_NOSMT, "0-3", (8,), minus="8-11,16-19,24-27", expected_uncores="0,1"),
    UncoreCase("odd integer cpu required on smt-disabled",
               _SMALL_NOSMT, "0-3", (5,), expected_cpus="8-12"),
    UncoreCase("odd integer required on smt-enabled",
               _EPYC_7702P, "0,1,64,65", (3,), full_pcpus_only=False, expected_cpus="2,3,66"),
    UncoreCase("odd integer required on odd integer partial uncore",
               _EPYC_7702P, "0,1,64", (3,), full_pcpus_only=False, expected_cpus="2,65,66"),
    UncoreCase("even integer required on odd integer partial uncore",
               _EPYC_7702P, "0,1,64", (4,), full_pcpus_only=False, expected_cpus="4,5,68,69"),
    UncoreCase("large odd integer required on smt-enabled",
               _EPYC_7702P, "0,1,64", (11,), full_pcpus_only=False,
               expected_cpus="2,65,66,4,5,6,7,68,69,70,71"),
    UncoreCase("odd integer required on HT monolithic uncore",
               _XEON_8490H, "0,1,120", (5,), full_pcpus_only=False, default_topo=_EPYC_7702P,
               expected_cpus="2,3,121,122,123"),
    UncoreCase("even integer required on HT monolithic uncore",
               _XEON_8490H, "0,1,120", (4,), full_pcpus_only=False, default_topo=_EPYC_7702P,
               expected_cpus="2,3,122,123"),
    # strict-cpu-reservation only removes the reserved CPUs from the shared pool, which the
    # upstream harness does in every case anyway.
    UncoreCase("GuPodSingleContainer, SingleSocketSMTSmallUncore, StrictReserveCompatability",
               _EPYC_7702P, "0,1,64,65", (2,), full_pcpus_only=False, expected_cpus="2,66"),
    UncoreCase("GuPodSingleContainer, DualSocketHTMonoUncore, StrictReserveCompatability",
               _XEON_8490H, "0,1,120,121", (4,), full_pcpus_only=False,
               expected_cpus="2,3,122,123"),
]
# fmt: on


@pytest.mark.parametrize("case", [pytest.param(c, id=c.description) for c in UNCORE_CASES])
def test_static_policy_add_with_uncore_alignment(
    upstream_topology: TopologyLookup, case: UncoreCase
) -> None:
    topo = upstream_topology(case.topo)
    reserved = parse_cpulist(case.reserved)
    policy = StaticPolicy(
        topo,
        Options(full_pcpus_only=case.full_pcpus_only, prefer_uncore=True),
        len(reserved),
        reserved,
    )
    default = upstream_topology(case.default_topo or case.topo).cpu_ids
    for uncore in case.minus_uncores:
        default -= topo.cpus_in_uncore_cache(uncore)
    default -= parse_cpulist(case.minus) | reserved

    allocations = []
    for n in case.containers:
        cpus = policy.allocate(default, n)
        assert len(cpus) == n
        default -= cpus
        allocations.append(cpus)

    if case.expected_cpus:
        assert format_cpulist(allocations[0]) == format_cpulist(parse_cpulist(case.expected_cpus))
        return
    uncores = {topo.info(cpu).uncore_cache_id for cpus in allocations for cpu in cpus}
    assert format_cpulist(uncores) == format_cpulist(parse_cpulist(case.expected_uncores))
