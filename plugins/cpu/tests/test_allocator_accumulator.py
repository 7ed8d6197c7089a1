"""Golden cases of kubelet's ``cpuAccumulator`` orderings and bookkeeping.

Ported from kubernetes ``pkg/kubelet/cm/cpumanager/cpu_assignment_test.go`` at commit
``fd5b2efa`` (as vendored in kubernetes-sigs/dra-driver-cpu): ``TestCPUAccumulatorFreeSockets``,
``...FreeNUMANodes``, ``...FreeSocketsAndNUMANodes``, ``...FreeCores``, ``...FreeCPUs`` and
``...Take``. These pin the orderings every allocation step is built on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from drakit.cpuset import parse_cpulist
from drakit_cpu.allocator import _Accumulator
from drakit_cpu.topology import CpuTopology

TopologyLookup = Callable[[str], CpuTopology]


def _acc(topology: CpuTopology, available: str, n: int = 0) -> _Accumulator:
    return _Accumulator(topology, parse_cpulist(available), n, spread=False)


@pytest.mark.parametrize(
    ("topo", "available", "expected"),
    [
        pytest.param("topoSingleSocketHT", "0-7", [0], id="single socket HT, 1 socket free"),
        pytest.param("topoSingleSocketHT", "1-7", [], id="single socket HT, 0 sockets free"),
        pytest.param("topoDualSocketHT", "0-11", [0, 1], id="dual socket HT, 2 sockets free"),
        pytest.param("topoDualSocketHT", "0-9,11", [1], id="dual socket HT, 1 socket free"),
        pytest.param("topoDualSocketHT", "0,2-9,11", [], id="dual socket HT, 0 sockets free"),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "0-79",
            [0, 1],
            id="dual socket, multi numa per socket, HT, 2 sockets free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-79",
            [1],
            id="dual socket, multi numa per socket, HT, 1 sockets free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-78",
            [],
            id="dual socket, multi numa per socket, HT, 0 sockets free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-79",
            [0, 1, 2, 3],
            id="dual numa, multi socket per per socket, HT, 4 sockets free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-19,21-79",
            [0, 1, 3],
            id="dual numa, multi socket per per socket, HT, 3 sockets free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-59,61-78",
            [0, 1],
            id="dual numa, multi socket per per socket, HT, 2 sockets free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "1-19,21-38,41-60,61-78",
            [1],
            id="dual numa, multi socket per per socket, HT, 1 sockets free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-40,42-49,51-68,71-79",
            [],
            id="dual numa, multi socket per per socket, HT, 0 sockets free",
        ),
    ],
)
def test_free_sockets(
    upstream_topology: TopologyLookup, topo: str, available: str, expected: list[int]
) -> None:
    # Upstream sorts this result before comparing.
    assert sorted(_acc(upstream_topology(topo), available).free_sockets()) == expected


@pytest.mark.parametrize(
    ("topo", "available", "expected"),
    [
        pytest.param("topoSingleSocketHT", "0-7", [0], id="single socket HT, 1 NUMA node free"),
        pytest.param("topoSingleSocketHT", "1-7", [], id="single socket HT, 0 NUMA Node free"),
        pytest.param("topoDualSocketHT", "0-11", [0, 1], id="dual socket HT, 2 NUMA Node free"),
        pytest.param("topoDualSocketHT", "0-9,11", [1], id="dual socket HT, 1 NUMA Node free"),
        pytest.param("topoDualSocketHT", "0,2-9,11", [], id="dual socket HT, 0 NUMA node free"),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "0-79",
            [0, 1, 2, 3],
            id="dual socket, multi numa per socket, HT, 4 NUMA Node free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-79",
            [1, 2, 3],
            id="dual socket, multi numa per socket, HT, 3 NUMA node free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-9,11-79",
            [2, 3],
            id="dual socket, multi numa per socket, HT, 2 NUMA node free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-9,11-59,61-79",
            [3],
            id="dual socket, multi numa per socket, HT, 1 NUMA node free",
        ),
        pytest.param(
            "topoDualSocketMultiNumaPerSocketHT",
            "1-9,11-59,61-78",
            [],
            id="dual socket, multi numa per socket, HT, 0 NUMA node free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-79",
            [0, 1],
            id="dual numa, multi socket per per socket, HT, 2 NUMA node free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-9,11-79",
            [1],
            id="dual numa, multi socket per per socket, HT, 1 NUMA node free",
        ),
        pytest.param(
            "fakeTopoMultiSocketDualSocketPerNumaHT",
            "0-9,11-59,61-79",
            [],
            id="dual numa, multi socket per per socket, HT, 0 sockets free",
        ),
    ],
)
def test_free_numa_nodes(
    upstream_topology: TopologyLookup, topo: str, available: str, expected: list[int]
) -> None:
    assert _acc(upstream_topology(topo), available).free_numa_nodes() == expected


@pytest.mark.parametrize(
    ("available", "sockets", "numa_nodes"),
    [
        pytest.param(
            "0-79",
            [0, 1],
            [0, 1, 2, 3],
            id="dual socket, multi numa per socket, HT, 2 Socket/4 NUMA Node free",
        ),
        pytest.param(
            "1-79",
            [1],
            [1, 2, 3],
            id="dual socket, multi numa per socket, HT, 1 Socket/3 NUMA node free",
        ),
        pytest.param(
            "1-9,11-79",
            [1],
            [2, 3],
            id="dual socket, multi numa per socket, HT, 1 Socket/ 2 NUMA node free",
        ),
        pytest.param(
            "1-59,61-79",
            [],
            [1, 3],
            id="dual socket, multi numa per socket, HT, 0 Socket/ 2 NUMA node free",
        ),
    ],
)
def test_free_sockets_and_numa_nodes(
    upstream_topology: TopologyLookup, available: str, sockets: list[int], numa_nodes: list[int]
) -> None:
    acc = _acc(upstream_topology("topoDualSocketMultiNumaPerSocketHT"), available)
    assert acc.free_numa_nodes() == numa_nodes
    assert acc.free_sockets() == sockets


@pytest.mark.parametrize(
    ("topo", "available", "expected"),
    [
        pytest.param(
            "topoSingleSocketHT", "0-7", [0, 1, 2, 3], id="single socket HT, 4 cores free"
        ),
        pytest.param(
            "topoSingleSocketHT", "0,1,2,4,5,6", [0, 1, 2], id="single socket HT, 3 cores free"
        ),
        pytest.param(
            "topoSingleSocketHT",
            "0-6",
            [0, 1, 2],
            id="single socket HT, 3 cores free (1 partially consumed)",
        ),
        pytest.param("topoSingleSocketHT", "", [], id="single socket HT, 0 cores free"),
        pytest.param(
            "topoSingleSocketHT",
            "0-3",
            [],
            id="single socket HT, 0 cores free (4 partially consumed)",
        ),
        pytest.param(
            "topoDualSocketHT", "0-11", [0, 2, 4, 1, 3, 5], id="dual socket HT, 6 cores free"
        ),
        pytest.param(
            "topoDualSocketHT",
            "1-5,7-11",
            [2, 4, 1, 3, 5],
            id="dual socket HT, 5 cores free (1 consumed from socket 0)",
        ),
        pytest.param(
            "topoDualSocketHT",
            "2-5,8-11",
            [2, 4, 3, 5],
            id="dual socket HT, 4 cores free (1 consumed from each socket)",
        ),
    ],
)
def test_free_cores(
    upstream_topology: TopologyLookup, topo: str, available: str, expected: list[int]
) -> None:
    assert _acc(upstream_topology(topo), available).free_cores() == expected


@pytest.mark.parametrize(
    ("topo", "available", "expected"),
    [
        pytest.param(
            "topoSingleSocketHT",
            "0-7",
            [0, 4, 1, 5, 2, 6, 3, 7],
            id="single socket HT, 8 cpus free",
        ),
        pytest.param(
            "topoSingleSocketHT", "3-7", [4, 5, 6, 3, 7], id="single socket HT, 5 cpus free"
        ),
        pytest.param(
            "topoDualSocketHT",
            "0-11",
            [0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            id="dual socket HT, 12 cpus free",
        ),
        pytest.param(
            "topoDualSocketHT",
            "1-11",
            [6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            id="dual socket HT, 11 cpus free",
        ),
        pytest.param(
            "topoDualSocketHT",
            "1-5,7-11",
            [2, 8, 4, 10, 1, 7, 3, 9, 5, 11],
            id="dual socket HT, 10 cpus free",
        ),
        pytest.param(
            "topoTripleSocketHT",
            "0-3,6-13",
            [12, 13, 0, 1, 2, 3, 6, 7, 8, 9, 10, 11],
            id="triple socket HT, 12 cpus free",
        ),
    ],
)
def test_free_cpus(
    upstream_topology: TopologyLookup, topo: str, available: str, expected: list[int]
) -> None:
    assert _acc(upstream_topology(topo), available).cpu_order() == expected


@dataclass(frozen=True)
class TakeCase:
    """An upstream TestCPUAccumulatorTake row (topology: topoSingleSocketHT)."""

    description: str
    available: str
    takes: tuple[str, ...]
    n: int
    satisfied: bool
    failed: bool


TAKE_CASES = [
    TakeCase("take 0 cpus from a single socket HT, require 1", "0-7", ("",), 1, False, False),
    TakeCase(
        "take 0 cpus from a single socket HT, require 1, none available", "", ("",), 1, False, True
    ),
    TakeCase("take 1 cpu from a single socket HT, require 1", "0-7", ("0",), 1, True, False),
    TakeCase("take 1 cpu from a single socket HT, require 2", "0-7", ("0",), 2, False, False),
    TakeCase(
        "take 2 cpu from a single socket HT, require 4, expect failed",
        "0-2",
        ("0", "1"),
        4,
        False,
        True,
    ),
    TakeCase(
        "take all cpus one at a time from a single socket HT, require 8",
        "0-7",
        tuple(str(cpu) for cpu in range(8)),
        8,
        True,
        False,
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.description) for c in TAKE_CASES])
def test_take(upstream_topology: TopologyLookup, case: TakeCase) -> None:
    acc = _acc(upstream_topology("topoSingleSocketHT"), case.available, case.n)
    taken = 0
    for cpus in case.takes:
        chosen = parse_cpulist(cpus)
        acc.take(chosen)
        taken += len(chosen)
    assert acc.is_satisfied() is case.satisfied
    assert acc.is_failed() is case.failed
    for cpus in case.takes:
        chosen = parse_cpulist(cpus)
        assert not chosen & acc.free
        assert chosen <= acc.result
    assert acc.need == case.n - taken
