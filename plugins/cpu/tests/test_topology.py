"""The CPU topology model and its discovery from sysfs (hand-written trees and sim profiles)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from drakit.cpuset import format_cpulist, parse_cpulist
from drakit.sim import build_profile, profile_info
from drakit_cpu.topology import CpuInfo, CpuTopology, TopologyError

TopologyLookup = Callable[[str], CpuTopology]

QUAD_SOCKET_FOUR_WAY_HT_SOCKETS = {
    # The per-socket CPU lists of the upstream topoQuadSocketFourWayHT comment, to cross-check
    # the core-by-core transcription in conftest.py.
    0: "0-2,9-10,13-14,21-22,25-26,33-34,38-39,46-47,50,57-58,71-72,79-80,87-88,95-96,"
    "103-104,109-110,117-118,131-132,139-140,147-148,155-156,163-164,169-170,177-178,191-192,"
    "199-200,207-208,215-216,223-224,229-230,237-238,251-252,259-260,267-268,275-276,283-284",
    1: "3-4,11-12,15-16,23-24,27-28,35-36,40-41,48-49,51-52,59-60,65-66,73-74,81-82,89-90,"
    "97-98,111-112,119-120,125-126,133-134,141-142,149-150,157-158,171-172,179-180,185-186,"
    "193-194,201-202,209-210,217-218,231-232,239-240,245-246,253-254,261-262,269-270,277-278",
    2: "5-6,17-18,29-30,42-43,53-54,61-62,67-68,75-76,83-84,91-92,99-100,105-106,113-114,"
    "121-122,127-128,135-136,143-144,151-152,159-160,165-166,173-174,181-182,187-188,195-196,"
    "203-204,211-212,219-220,225-226,233-234,241-242,247-248,255-256,263-264,271-272,279-280,"
    "285-286",
    3: "7-8,19-20,31-32,37,44-45,55-56,63-64,69-70,77-78,85-86,93-94,101-102,107-108,115-116,"
    "123-124,129-130,137-138,145-146,153-154,161-162,167-168,175-176,183-184,189-190,197-198,"
    "205-206,213-214,221-222,227-228,235-236,243-244,249-250,257-258,265-266,273-274,281-282,287",
}


# ---------------------------------------------------------------- the model


def test_quad_socket_fixture_matches_its_upstream_socket_lists(
    upstream_topology: TopologyLookup,
) -> None:
    topo = upstream_topology("topoQuadSocketFourWayHT")
    assert len(topo.cpu_ids) == 288
    assert len(topo.cores()) == 72
    for socket, cpulist in QUAD_SOCKET_FOUR_WAY_HT_SOCKETS.items():
        assert topo.cpus_in_socket(socket) == parse_cpulist(cpulist)
    assert {len(topo.cpus_in_core(core)) for core in topo.cores()} == {4}


def test_queries_and_derived_sizes(upstream_topology: TopologyLookup) -> None:
    topo = upstream_topology("topoDualSocketMultiNumaPerSocketHT")
    assert topo.cpus_per_core() == 2
    assert topo.cpus_per_socket() == 40
    assert topo.cpus_per_uncore() == 0  # NumUncoreCache is 0 in the upstream fixture
    assert not topo.numa_first  # 4 NUMA nodes on 2 sockets: sockets rank first
    assert topo.numa_nodes_in_socket(1) == {2, 3}
    assert topo.sockets_in_numa_node(3) == {1}
    assert format_cpulist(topo.cpus_in_numa_node(1)) == "10-19,50-59"
    assert topo.cores_in_numa_node(0) == frozenset(range(10))
    assert topo.cores_in_socket(1) == frozenset(range(20, 40))
    assert topo.siblings(45) == {5, 45}
    assert topo.cpus_in_core(5) == {5, 45}
    assert topo.uncore_caches_in_numa_node(2) == {0}
    assert topo.cores_in_uncore_cache(0) == frozenset(range(40))
    assert topo.cpus_in_socket(9) == frozenset()
    assert topo.info(41) == CpuInfo(41, 1, 0, 0, 0)


def test_from_cpus_derives_counts_and_sorts() -> None:
    infos = [CpuInfo(cpu, cpu % 2, 0, cpu // 2, cpu // 2) for cpu in (3, 1, 2, 0)]
    topo = CpuTopology.from_cpus(infos, numa_distances={1: [20, 10], 0: [10, 20]})
    assert [i.cpu for i in topo.cpus] == [0, 1, 2, 3]
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets) == (4, 2, 1)
    assert (topo.num_numa_nodes, topo.num_uncore_caches) == (2, 2)
    assert topo.numa_distance(0, 1) == 20
    assert topo.numa_distance(1, 1) == 10
    assert topo.numa_distance(0, 7) is None


def test_topology_is_immutable_and_hashable() -> None:
    topo = CpuTopology.from_cpus([CpuInfo(0, 0, 0, 0, 0)])
    with pytest.raises(FrozenInstanceError):
        topo.num_cpus = 2  # type: ignore[misc]
    assert topo == CpuTopology.from_cpus([CpuInfo(0, 0, 0, 0, 0)])
    assert len({topo, CpuTopology.from_cpus([CpuInfo(0, 0, 0, 0, 0)])}) == 1


def test_duplicate_cpu_ids_are_rejected() -> None:
    with pytest.raises(TopologyError, match="unique"):
        CpuTopology.from_cpus([CpuInfo(0, 0, 0, 0, 0), CpuInfo(0, 1, 0, 0, 0)])


# ---------------------------------------------------------------- sysfs discovery


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="ascii")


def _sysfs(
    root: Path,
    cpus: dict[int, tuple[int, int, str | None, tuple[int, str] | None]],
    nodes: Mapping[int, tuple[str, str | None]],
    *,
    online: str | None = None,
    siblings_file: str = "core_cpus_list",
) -> Path:
    """Write a minimal sysfs tree.

    ``cpus``: cpu -> (physical_package_id, sysfs core_id, siblings list or None,
    (L3 id or -1 for no ``id`` file, L3 shared list) or None); ``nodes``: node -> (cpulist,
    distance line or None).
    """
    cpu_root = root / "sys/devices/system/cpu"
    if online is not None:
        _write(cpu_root / "online", online)
    for cpu, (package, core, siblings, l3) in cpus.items():
        topo_dir = cpu_root / f"cpu{cpu}" / "topology"
        _write(topo_dir / "physical_package_id", str(package))
        _write(topo_dir / "core_id", str(core))
        if siblings is not None:
            _write(topo_dir / siblings_file, siblings)
        cache = cpu_root / f"cpu{cpu}" / "cache"
        _write(cache / "index0" / "level", "1")
        _write(cache / "index0" / "shared_cpu_list", str(cpu))
        if l3 is not None:
            l3_id, shared = l3
            _write(cache / "index3" / "level", "3")
            _write(cache / "index3" / "shared_cpu_list", shared)
            if l3_id >= 0:
                _write(cache / "index3" / "id", str(l3_id))
    for node, (cpulist, distance) in nodes.items():
        node_dir = root / "sys/devices/system/node" / f"node{node}"
        _write(node_dir / "cpulist", cpulist)
        if distance is not None:
            _write(node_dir / "distance", distance)
    return root


def _two_socket_tree(root: Path, l3_per_core: bool) -> Path:
    # 2 sockets x 2 cores x SMT2, Linux numbering: cpu = thread * 4 + core; sysfs core_id
    # restarts at 0 on each package.
    cpus: dict[int, tuple[int, int, str | None, tuple[int, str] | None]] = {}
    for cpu in range(8):
        core = cpu % 4
        socket = core // 2
        siblings = f"{core},{core + 4}"
        l3 = (
            (core, siblings)
            if l3_per_core
            else (socket, f"{2 * socket}-{2 * socket + 1},{2 * socket + 4}-{2 * socket + 5}")
        )
        cpus[cpu] = (socket, core % 2, siblings, l3)
    nodes = {0: ("0-1,4-5", "10 21"), 1: ("2-3,6-7", "21 10")}
    return _sysfs(root, cpus, nodes, online="0-7")


def test_from_sysfs_uses_kubelet_core_ids_and_socket_uncore_for_node_wide_l3(
    tmp_path: Path,
) -> None:
    topo = CpuTopology.from_sysfs(_two_socket_tree(tmp_path, l3_per_core=False))
    assert topo.cpus == tuple(
        CpuInfo(cpu, cpu % 4, (cpu % 4) // 2, (cpu % 4) // 2, (cpu % 4) // 2) for cpu in range(8)
    )
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets) == (8, 4, 2)
    assert (topo.num_numa_nodes, topo.num_uncore_caches) == (2, 2)
    assert topo.numa_distances == ((0, (10, 21)), (1, (21, 10)))
    assert topo.numa_distance(1, 0) == 21


def test_from_sysfs_uses_l3_ids_when_the_l3_is_smaller_than_the_node(tmp_path: Path) -> None:
    topo = CpuTopology.from_sysfs(_two_socket_tree(tmp_path, l3_per_core=True))
    assert [info.uncore_cache_id for info in topo.cpus] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert topo.num_uncore_caches == 4
    assert topo.cpus_per_uncore() == 2


def test_from_sysfs_sub_numa_clustering_shares_one_l3_between_nodes(tmp_path: Path) -> None:
    # 1 socket, 4 cores, no SMT, SNC2: nodes {0,1} and {2,3}, the L3 spans the socket.
    cpus: dict[int, tuple[int, int, str | None, tuple[int, str] | None]] = {
        cpu: (0, cpu, str(cpu), (7, "0-3")) for cpu in range(4)
    }
    topo = CpuTopology.from_sysfs(
        _sysfs(tmp_path, cpus, {0: ("0-1", None), 1: ("2-3", None)}, online="0-3"),
        numa_distances=False,
    )
    assert {info.uncore_cache_id for info in topo.cpus} == {7}
    assert topo.uncore_caches_in_numa_node(0) == topo.uncore_caches_in_numa_node(1) == {7}
    assert not topo.numa_first
    assert topo.numa_distances == ()


def test_from_sysfs_fallbacks(tmp_path: Path) -> None:
    # No online file, no NUMA directories, thread_siblings_list instead of core_cpus_list,
    # an L3 without an id (some ARM kernels): lowest sharing CPU names it.
    cpus: dict[int, tuple[int, int, str | None, tuple[int, str] | None]] = {
        cpu: (0, cpu % 2, f"{cpu % 2},{cpu % 2 + 2}", (-1, "0-3")) for cpu in range(4)
    }
    root = _sysfs(tmp_path, cpus, {}, siblings_file="thread_siblings_list")
    topo = CpuTopology.from_sysfs(root, numa_distances={0: [10]})
    assert topo.cpus == tuple(CpuInfo(cpu, cpu % 2, 0, 0, 0) for cpu in range(4))
    assert topo.numa_distances == ((0, (10,)),)


def test_from_sysfs_groups_by_package_and_core_id_without_sibling_lists(tmp_path: Path) -> None:
    cpus: dict[int, tuple[int, int, str | None, tuple[int, str] | None]] = {
        0: (0, 0, None, None),
        1: (1, 0, None, None),
        2: (0, 0, None, None),
        3: (1, 0, None, None),
    }
    topo = CpuTopology.from_sysfs(_sysfs(tmp_path, cpus, {}, online="0-3"))
    assert [info.core_id for info in topo.cpus] == [0, 1, 0, 1]
    assert [info.uncore_cache_id for info in topo.cpus] == [0, 1, 0, 1]  # no L3: socket id


def test_from_sysfs_ignores_offline_cpus(tmp_path: Path) -> None:
    tree = _two_socket_tree(tmp_path, l3_per_core=False)
    _write(tree / "sys/devices/system/cpu/online", "1-7")
    topo = CpuTopology.from_sysfs(tree)
    assert 0 not in topo.cpu_ids
    assert topo.info(4).core_id == 4  # cpu0 is offline: its sibling 4 names the core
    assert topo.siblings(4) == {4}


def test_from_sysfs_reports_missing_files(tmp_path: Path) -> None:
    tree = _two_socket_tree(tmp_path, l3_per_core=False)
    (tree / "sys/devices/system/cpu/cpu3/topology/physical_package_id").unlink()
    with pytest.raises(TopologyError, match="cpu3/topology/physical_package_id"):
        CpuTopology.from_sysfs(tree)


def test_from_sysfs_needs_an_online_cpu(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no online CPU"):
        CpuTopology.from_sysfs(tmp_path)


# ---------------------------------------------------------------- simulated hardware profiles


def test_from_sysfs_on_the_minimal_sim_profile(tmp_path: Path) -> None:
    root = build_profile("minimal-1s", tmp_path / "root")
    topo = CpuTopology.from_sysfs(root)
    info = profile_info("minimal-1s")
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets) == (info.cpus, info.cores, 1)
    assert (topo.num_numa_nodes, topo.num_uncore_caches) == (info.numa_nodes, info.l3_groups)
    assert topo.siblings(0) == {0, 4}
    # The single L3 covers the single NUMA node, so kubelet's uncore id is the socket id.
    assert {i.uncore_cache_id for i in topo.cpus} == {0}


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["epyc-genoa-2s", "spr-2s-snc2"])
def test_from_sysfs_counts_on_large_sim_profiles(tmp_path: Path, profile: str) -> None:
    topo = CpuTopology.from_sysfs(build_profile(profile, tmp_path / "root"))
    info = profile_info(profile)
    assert (topo.num_cpus, topo.num_cores, topo.num_sockets) == (
        info.cpus,
        info.cores,
        info.sockets,
    )
    assert (topo.num_numa_nodes, topo.num_uncore_caches) == (info.numa_nodes, info.l3_groups)
    assert all(len(topo.siblings(cpu)) == 2 for cpu in topo.cpu_ids)


@pytest.mark.slow
def test_sim_genoa_discovers_exactly_the_upstream_epyc_9654_fixture(
    tmp_path: Path, upstream_topology: TopologyLookup
) -> None:
    # kubelet's TestStaticPolicyAddWithUncoreAlignment models the same machine by hand.
    discovered = CpuTopology.from_sysfs(build_profile("epyc-genoa-2s", tmp_path / "root"))
    expected = upstream_topology("topoDualSocketSingleNumaPerSocketSMTUncore")
    assert discovered.cpus == expected.cpus
    assert (discovered.num_cpus, discovered.num_cores, discovered.num_uncore_caches) == (
        expected.num_cpus,
        expected.num_cores,
        expected.num_uncore_caches,
    )
