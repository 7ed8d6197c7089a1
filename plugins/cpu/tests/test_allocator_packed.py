"""Golden cases of kubelet's packed algorithm, its uncore variant and the spread variant.

Ported from kubernetes ``pkg/kubelet/cm/cpumanager/cpu_assignment_test.go`` at commit
``fd5b2efa`` (as vendored in kubernetes-sigs/dra-driver-cpu ``pkg/cpumanager``):
``commonTakeByTopologyTestCases``, ``TestTakeByTopologyNUMAPacked`` and
``TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption``. Test ids are the upstream
descriptions. Each case is (topology, available CPUs, request, expected error, expected CPUs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit_cpu.allocator import AllocationError, take_packed, take_spread
from drakit_cpu.topology import CpuTopology

TopologyLookup = Callable[[str], CpuTopology]


@dataclass(frozen=True)
class Golden:
    """One upstream table row: description (the pytest id), topology, free CPUs, request,
    expected error message (empty for none) and expected CPUs."""

    description: str
    topo: str
    available: str
    n: int
    error: str
    expected: str


def params(cases: list[Golden]) -> list[object]:
    """The cases as pytest parameters named after the upstream descriptions."""
    return [pytest.param(c, id=c.description) for c in cases]


# fmt: off
# commonTakeByTopologyTestCases: shared by the packed and (cpuGroupSize 1) distributed tests.
COMMON_CASES = [
    Golden(
        "take more cpus than are available from single socket with HT",
        "topoSingleSocketHT", "0,2,4,6", 5,
        "not enough cpus available to satisfy request: requested=5, available=4", "",
    ),
    Golden("take zero cpus from single socket with HT", "topoSingleSocketHT", "0-7", 0, "", ""),
    Golden("take one cpu from single socket with HT", "topoSingleSocketHT", "0-7", 1, "", "0"),
    Golden(
        "take one cpu from single socket with HT, some cpus are taken",
        "topoSingleSocketHT", "1,3,5,6,7", 1, "", "6",
    ),
    Golden("take two cpus from single socket with HT", "topoSingleSocketHT", "0-7", 2, "", "0,4"),
    Golden("take all cpus from single socket with HT", "topoSingleSocketHT", "0-7", 8, "", "0-7"),
    Golden(
        "take two cpus from single socket with HT, only one core totally free",
        "topoSingleSocketHT", "0-3,6", 2, "", "2,6",
    ),
    Golden(
        "take a socket of cpus from dual socket with HT",
        "topoDualSocketHT", "0-11", 6, "", "0,2,4,6,8,10",
    ),
    Golden(
        "take a socket of cpus from dual socket with multi-numa-per-socket with HT",
        "topoDualSocketMultiNumaPerSocketHT", "0-79", 40, "", "0-19,40-59",
    ),
    Golden(
        "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT",
        "topoDualSocketMultiNumaPerSocketHT", "0-79", 20, "", "0-9,40-49",
    ),
    Golden(
        "take a NUMA node of cpus from dual socket with multi-numa-per-socket with HT, "
        "with 1 NUMA node already taken",
        "topoDualSocketMultiNumaPerSocketHT", "10-39,50-79", 20, "", "10-19,50-59",
    ),
    Golden(
        "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket "
        "with HT",
        "topoDualSocketMultiNumaPerSocketHT", "0-79", 60, "", "0-29,40-69",
    ),
    Golden(
        "take a socket and a NUMA node of cpus from dual socket with multi-numa-per-socket "
        "with HT, a core taken",
        "topoDualSocketMultiNumaPerSocketHT", "1-39,41-79", 60, "", "10-39,50-79",
    ),
]

# TestTakeByTopologyNUMAPacked: the cases added to the common ones (no uncore preference).
PACKED_CASES = [
    *COMMON_CASES,
    Golden(
        "take one cpu from dual socket with HT - core from Socket 0",
        "topoDualSocketHT", "1-5,7-11", 1, "", "2",
    ),
    Golden(
        "allocate 4 full cores with 3 coming from the first NUMA node (filling it up) "
        "and 1 coming from the second NUMA node",
        "topoDualSocketHT", "0-11", 8, "", "0,6,2,8,4,10,1,7",
    ),
    Golden(
        "allocate 32 full cores with 30 coming from the first 3 NUMA nodes (filling them up) "
        "and 2 coming from the fourth NUMA node",
        "topoDualSocketMultiNumaPerSocketHT", "0-79", 64, "", "0-29,40-69,30,31,70,71",
    ),
]

# TestTakeByTopologyNUMAPacked: the PreferAlignByUncoreCacheOption cases.
UNCORE_CASES = [
    Golden(
        "take cpus from two full UncoreCaches and partial from a single UncoreCache",
        "topoUncoreSingleSocketNoSMT", "1-15", 10, "", "1,2,4-11",
    ),
    Golden(
        "take one cpu from dual socket with HT - core from Socket 0",
        "topoDualSocketHT", "1-5,7-11", 1, "", "1",
    ),
    Golden(
        "take first available UncoreCache from first socket",
        "topoUncoreDualSocketNoSMT", "0-15", 4, "", "0-3",
    ),
    Golden(
        "take all available UncoreCache from first socket",
        "topoUncoreDualSocketNoSMT", "2-15", 6, "", "2-7",
    ),
    Golden(
        "take first available UncoreCache from second socket",
        "topoUncoreDualSocketNoSMT", "8-15", 4, "", "8-11",
    ),
    Golden(
        "take first available UncoreCache from available NUMA",
        "topoUncoreSingleSocketMultiNuma", "3,4-8,12", 2, "", "4,5",
    ),
    Golden(
        "take cpus from best available UncoreCache group of multi uncore cache single socket "
        "- SMT enabled",
        "topoUncoreSingleSocketSMT", "2-3,10-11,4-7,12-15", 6, "", "4,5,6,12,13,14",
    ),
    Golden(
        "take cpus from multiple UncoreCache of single socket - SMT enabled",
        "topoUncoreSingleSocketSMT", "1-7,9-15", 10, "", "4-7,12-15,1,9",
    ),
]

# TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption.
SPREAD_CASES = [
    Golden(
        "take a socket of cpus from single socket with HT, 3 cpus",
        "topoSingleSocketHT", "0-7", 3, "", "0,1,2",
    ),
    Golden(
        "take a socket of cpus from dual socket with HT, 2 cpus",
        "topoDualSocketHT", "0-11", 2, "", "0,2",
    ),
    Golden(
        "take a socket of cpus from dual socket with HT, 3 cpus",
        "topoDualSocketHT", "0-11", 3, "", "0,2,4",
    ),
    Golden(
        "take a socket of cpus from dual socket with HT, 6 cpus",
        "topoDualSocketHT", "0-11", 6, "", "0,2,4,6,8,10",
    ),
    Golden(
        "take cpus from dual socket with HT, 8 cpus",
        "topoDualSocketHT", "0-11", 8, "", "0,2,4,6,8,10,1,3",
    ),
    Golden(
        "take a socket of cpus from dual socket without HT, 2 cpus",
        "topoDualSocketNoHT", "0-7", 2, "", "0,1",
    ),
    Golden(
        # DistributeCPUsAcrossCores doesn't care socket and numa ranking (upstream comment).
        "take a socket of cpus from dual socket with multi numa per socket and HT, 12 cpus",
        "topoDualSocketMultiNumaPerSocketHT", "0-79", 8, "", "0-7",
    ),
]
# fmt: on


def _check(case: Golden, run: Callable[[frozenset[int]], frozenset[int]]) -> None:
    free = parse_cpulist(case.available)
    if case.error:
        with pytest.raises(AllocationError) as excinfo:
            run(free)
        assert str(excinfo.value) == case.error
        return
    assert format_cpulist(run(free)) == format_cpulist(parse_cpulist(case.expected))


@pytest.mark.parametrize("case", params(PACKED_CASES))
def test_take_packed_golden(upstream_topology: TopologyLookup, case: Golden) -> None:
    topology = upstream_topology(case.topo)
    _check(case, lambda free: take_packed(topology, free, case.n))


@pytest.mark.parametrize("case", params(UNCORE_CASES))
def test_take_packed_prefer_uncore_golden(upstream_topology: TopologyLookup, case: Golden) -> None:
    topology = upstream_topology(case.topo)
    _check(case, lambda free: take_packed(topology, free, case.n, prefer_uncore=True))


@pytest.mark.parametrize("case", params(SPREAD_CASES))
def test_take_spread_golden(upstream_topology: TopologyLookup, case: Golden) -> None:
    topology = upstream_topology(case.topo)
    _check(case, lambda free: take_spread(topology, free, case.n))


def test_partial_uncore_smt_quirk_of_issue_137315(upstream_topology: TopologyLookup) -> None:
    # kubernetes issue #137315 (open; fixes #137319/#137360 closed unmerged): with SMT and
    # some cores of a cache half-free, takePartialUncore picks the lowest core ids and misses
    # the fit, so the request spans two caches. Parity means reproducing it.
    topology = upstream_topology("topoUncoreSingleSocketSMT")
    got = take_packed(topology, parse_cpulist("3,5,7,11-15"), 5, prefer_uncore=True)
    assert format_cpulist(got) == "3,5,11-13"
