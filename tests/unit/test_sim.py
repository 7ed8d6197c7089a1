"""Tests for drakit.sim: every profile builds a tree that reads like the real sysfs.

The tests read the built tree the way discovery does (``os.path.realpath`` on
``sys/bus/pci/devices/<BDF>``, reading files, parsing CPU lists) and compare against numbers
written here by hand from the reference topologies, never against the builder's internals.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.treedigest import tree_digest

from drakit.cpuset import parse_cpulist
from drakit.sim import (
    DEFAULT_PROFILE,
    CacheSpec,
    CpuSpec,
    MachineSpec,
    PciDeviceSpec,
    PciRootSpec,
    SimSpecError,
    SysfsBuilder,
    UnknownProfileError,
    build_profile,
    list_profiles,
    materialize,
    profile_info,
)
from drakit_nvidia_gpu.sim import load_nvml_description


@dataclass(frozen=True)
class Expect:
    sockets: int
    cores: int
    cpus: int
    numa: int
    l3: int
    gpus: int = 0
    nics: int = 0
    vfs_per_nic: int = 0
    model: str = ""


EXPECTED: dict[str, Expect] = {
    "minimal-1s": Expect(1, 4, 8, 1, 1, model="E-2334"),
    "epyc-genoa-2s": Expect(2, 192, 384, 2, 24, model="EPYC 9654"),
    "epyc-genoa-2s-nps4": Expect(2, 192, 384, 8, 24, model="EPYC 9654"),
    "spr-2s-snc2": Expect(2, 112, 224, 4, 2, model="8480+"),
    "mi300x-8gpu-8ainic": Expect(2, 96, 192, 2, 16, gpus=8, nics=8, model="EPYC 9474F"),
    "mi300x-8gpu-8ainic-16vf": Expect(
        2, 96, 192, 2, 16, gpus=8, nics=8, vfs_per_nic=16, model="EPYC 9474F"
    ),
    "dgx-h100": Expect(2, 112, 224, 2, 2, gpus=8, nics=8, model="8480C"),
    "h200-8gpu-8ainic": Expect(2, 112, 224, 2, 2, gpus=8, nics=8, model="8480+"),
    "h200-8gpu-8ainic-sriov": Expect(
        2, 112, 224, 2, 2, gpus=8, nics=8, vfs_per_nic=4, model="8480+"
    ),
}
ALL = sorted(EXPECTED)
PCI = [name for name in ALL if EXPECTED[name].gpus]
AINIC = [
    "mi300x-8gpu-8ainic",
    "mi300x-8gpu-8ainic-16vf",
    "h200-8gpu-8ainic",
    "h200-8gpu-8ainic-sriov",
]
NVIDIA = ["dgx-h100", "h200-8gpu-8ainic", "h200-8gpu-8ainic-sriov"]

PENSANDO, IONIC_PF, IONIC_VF = 0x1DD8, 0x1002, 0x1003
ROOT_DIR = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


# -- reading helpers: what discovery does ----------------------------------------------------


def read(path: Path) -> str:
    return path.read_text(encoding="ascii").strip()


def read_int(path: Path, base: int = 10) -> int:
    return int(read(path), base)


def cpus_of(path: Path) -> frozenset[int]:
    return parse_cpulist(read(path))


@dataclass(frozen=True)
class Fn:
    """A PCI function found through sys/bus/pci/devices, as discovery sees it."""

    bdf: str
    real: Path
    chain: tuple[str, ...]  # below sys/devices: pcieRoot, bridges..., the function
    vendor: int
    device: int
    klass: int

    @property
    def is_bridge(self) -> bool:
        return self.klass >> 8 == 0x0604

    @property
    def is_gpu(self) -> bool:
        return self.klass >> 16 in (0x03, 0x12)

    @property
    def is_vf(self) -> bool:
        return (self.real / "physfn").is_symlink()

    @property
    def is_nic_pf(self) -> bool:
        return self.klass >> 16 == 0x02 and not self.is_vf


def pci_functions(root: Path) -> dict[str, Fn]:
    devices = root / "sys" / "devices"
    out: dict[str, Fn] = {}
    for link in sorted((root / "sys/bus/pci/devices").iterdir()):
        assert link.is_symlink(), link
        assert not os.path.isabs(os.readlink(link)), "bus links must be relative"
        real = Path(os.path.realpath(link))
        chain = real.relative_to(os.path.realpath(devices)).parts
        out[link.name] = Fn(
            bdf=link.name,
            real=real,
            chain=chain,
            vendor=read_int(real / "vendor", 16),
            device=read_int(real / "device", 16),
            klass=read_int(real / "class", 16),
        )
    return out


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A base directory, on tmpfs when there is room (the trees hold ~10-20k entries each)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 << 30:
        base = Path(tempfile.mkdtemp(prefix="drakit-test-sim-", dir=shm))
        yield base
        shutil.rmtree(base, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("sim")


class Built:
    """Builds each profile once per module, on first use."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.roots: dict[str, Path] = {}

    def __call__(self, name: str) -> Path:
        if name not in self.roots:
            self.roots[name] = build_profile(name, self.base / name)
        return self.roots[name]


@pytest.fixture(scope="module")
def built(sim_base: Path) -> Built:
    return Built(sim_base)


# -- API -------------------------------------------------------------------------------------


def test_list_profiles_names_every_profile_once() -> None:
    assert list_profiles() == ALL
    assert DEFAULT_PROFILE == "h200-8gpu-8ainic"


@pytest.mark.parametrize("name", ALL)
def test_profile_info_counts_and_one_line(name: str) -> None:
    info = profile_info(name)
    want = EXPECTED[name]
    assert (info.sockets, info.cores, info.cpus, info.numa_nodes, info.l3_groups) == (
        want.sockets,
        want.cores,
        want.cpus,
        want.numa,
        want.l3,
    )
    assert (info.gpus, info.nics, info.vfs) == (want.gpus, want.nics, want.nics * want.vfs_per_nic)
    line = str(info)
    assert "\n" not in line
    assert f"{want.cpus} CPUs" in line


def test_unknown_profile_error_lists_known_profiles(tmp_path: Path) -> None:
    with pytest.raises(UnknownProfileError) as caught:
        build_profile("epyc-genoa-3s", tmp_path / "x")
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, KeyError)
    message = str(caught.value)
    assert "'epyc-genoa-3s'" in message
    for name in ALL:
        assert name in message
    assert not (tmp_path / "x").exists()
    with pytest.raises(UnknownProfileError), materialize("nope"):
        pass
    with pytest.raises(UnknownProfileError):
        profile_info("nope")


def test_materialize_yields_a_built_root_and_removes_it() -> None:
    with materialize("minimal-1s") as root:
        assert read(root / "sys/devices/system/cpu/online") == "0-7"
        assert json.loads(read(root / "drakit-sim/machine.json"))["name"] == "minimal-1s"
    assert not root.exists()


def test_build_refuses_a_non_empty_root(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("x")
    with pytest.raises(FileExistsError):
        build_profile("minimal-1s", tmp_path)


def test_builds_are_deterministic(sim_base: Path, built: Built) -> None:
    for name in ("minimal-1s", "h200-8gpu-8ainic-sriov"):
        again = build_profile(name, sim_base / f"{name}-again")
        try:
            assert tree_digest(built(name)) == tree_digest(again)
        finally:
            shutil.rmtree(again)


# -- CPUs, caches, NUMA ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_cpu_counts_match_the_spec(name: str, built: Built) -> None:
    root, want = built(name), EXPECTED[name]
    cpu_dir = root / "sys/devices/system/cpu"
    online = cpus_of(cpu_dir / "online")
    assert online == frozenset(range(want.cpus))
    assert cpus_of(cpu_dir / "possible") == online == cpus_of(cpu_dir / "present")
    assert cpus_of(cpu_dir / "isolated") == frozenset()
    assert read(cpu_dir / "smt/control") == "on"
    packages, cores, l3_ids, l3_sets = set(), set(), set(), set()
    for cpu in sorted(online):
        topo = cpu_dir / f"cpu{cpu}/topology"
        package = read_int(topo / "physical_package_id")
        packages.add(package)
        cores.add((package, read_int(topo / "core_id")))
        for index in sorted((cpu_dir / f"cpu{cpu}/cache").iterdir()):
            if read_int(index / "level") == 3:
                assert read(index / "type") == "Unified"
                l3_ids.add(read_int(index / "id"))
                shared = cpus_of(index / "shared_cpu_list")
                assert cpu in shared
                l3_sets.add(shared)
    assert len(packages) == want.sockets
    assert len(cores) == want.cores
    assert len(l3_ids) == len(l3_sets) == want.l3
    cpuinfo = read(root / "proc/cpuinfo")
    assert len(re.findall(r"^processor\t: \d+$", cpuinfo, re.MULTILINE)) == want.cpus
    model_names = set(re.findall(r"^model name\t: (.*)$", cpuinfo, re.MULTILINE))
    assert len(model_names) == 1
    assert want.model in model_names.pop()


@pytest.mark.parametrize("name", ALL)
def test_smt_siblings_are_consistent(name: str, built: Built) -> None:
    root, want = built(name), EXPECTED[name]
    cpu_dir = root / "sys/devices/system/cpu"
    for cpu in range(want.cpus):
        topo = cpu_dir / f"cpu{cpu}/topology"
        siblings = cpus_of(topo / "thread_siblings_list")
        # Linux x86 numbering: the SMT sibling of CPU n is n + total cores.
        assert siblings == {cpu % want.cores, cpu % want.cores + want.cores}
        assert cpus_of(topo / "core_cpus_list") == siblings
        package = cpus_of(topo / "core_siblings_list")
        assert cpus_of(topo / "package_cpus_list") == package
        assert siblings <= package
        assert len(package) == want.cpus // want.sockets
        for sibling in siblings:
            other = cpu_dir / f"cpu{sibling}/topology"
            assert cpus_of(other / "thread_siblings_list") == siblings
            assert read(other / "core_id") == read(topo / "core_id")
            assert read(other / "physical_package_id") == read(topo / "physical_package_id")
        l1 = cpus_of(cpu_dir / f"cpu{cpu}/cache/index0/shared_cpu_list")
        assert l1 == siblings


@pytest.mark.parametrize("name", ALL)
def test_numa_nodes_partition_the_cpus(name: str, built: Built) -> None:
    root, want = built(name), EXPECTED[name]
    node_dir = root / "sys/devices/system/node"
    nodes = sorted(cpus_of(node_dir / "online"))
    assert nodes == list(range(want.numa))
    assert cpus_of(node_dir / "has_cpu") == frozenset(nodes)
    seen: set[int] = set()
    for node in nodes:
        members = cpus_of(node_dir / f"node{node}/cpulist")
        assert len(members) == want.cpus // want.numa
        assert not members & seen
        seen |= members
        packages = {
            read(root / f"sys/devices/system/cpu/cpu{c}/topology/physical_package_id")
            for c in members
        }
        assert len(packages) == 1, "a NUMA node never spans sockets in these profiles"
        row = [int(x) for x in read(node_dir / f"node{node}/distance").split()]
        assert len(row) == want.numa
        assert row[node] == 10
        assert all(d > 10 for i, d in enumerate(row) if i != node)
        assert f"Node {node} MemTotal:" in read(node_dir / f"node{node}/meminfo")
        for cpu in members:
            links = [p.name for p in (root / f"sys/devices/system/cpu/cpu{cpu}").glob("node*")]
            assert links == [f"node{node}"]
            target = root / f"sys/devices/system/cpu/cpu{cpu}/node{node}"
            assert os.path.realpath(target) == os.path.realpath(node_dir / f"node{node}")
    assert seen == set(range(want.cpus))
    for node in nodes:  # SLIT is symmetric
        cells = read(node_dir / f"node{node}/distance").split()
        for other in nodes:
            assert cells[other] == read(node_dir / f"node{other}/distance").split()[node]


def test_genoa_l3_is_one_8_core_ccd_with_siblings(built: Built) -> None:
    root = built("epyc-genoa-2s")
    shared = cpus_of(root / "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list")
    assert shared == frozenset(range(8)) | frozenset(range(192, 200))
    assert read(root / "sys/devices/system/cpu/cpu0/cache/index3/size") == "32768K"
    # socket 1 starts at CPU 96; its siblings at 288
    assert read(root / "sys/devices/system/cpu/cpu96/topology/physical_package_id") == "1"
    assert read(root / "sys/devices/system/cpu/cpu288/topology/physical_package_id") == "1"
    assert read(root / "sys/devices/system/cpu/cpu96/topology/core_id") == "0"


def test_genoa_nps4_nodes_are_24_cores_each(built: Built) -> None:
    root = built("epyc-genoa-2s-nps4")
    node1 = cpus_of(root / "sys/devices/system/node/node1/cpulist")
    assert node1 == frozenset(range(24, 48)) | frozenset(range(216, 240))
    row = [int(x) for x in read(root / "sys/devices/system/node/node0/distance").split()]
    assert row[:4] == [10, 12, 12, 12]
    assert set(row[4:]) == {32}


def test_spr_snc2_l3_spans_both_nodes_of_a_socket(built: Built) -> None:
    root = built("spr-2s-snc2")
    l3 = cpus_of(root / "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list")
    node0 = cpus_of(root / "sys/devices/system/node/node0/cpulist")
    node1 = cpus_of(root / "sys/devices/system/node/node1/cpulist")
    assert l3 == node0 | node1
    assert node0 == frozenset(range(28)) | frozenset(range(112, 140))


def test_partial_ccds_leave_gaps_in_core_id(built: Built) -> None:
    root = built("mi300x-8gpu-8ainic")  # EPYC 9474F: 8 CCDs x 6 cores, core_id by CCD slot
    ids = {
        read_int(root / f"sys/devices/system/cpu/cpu{cpu}/topology/core_id") for cpu in range(48)
    }
    assert ids == {ccd * 8 + i for ccd in range(8) for i in range(6)}


def test_minimal_profile_masks_and_no_pci(built: Built) -> None:
    root = built("minimal-1s")
    assert read(root / "sys/devices/system/node/node0/cpumap") == "ff"
    assert (
        read(root / "sys/devices/system/cpu/cpu1/topology/thread_siblings") == "22"
    )  # CPUs 1 and 5
    assert list((root / "sys/bus/pci/devices").iterdir()) == []
    assert not (root / "drakit-sim/nvml.json").exists()


# -- PCI -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PCI)
def test_every_pci_function_resolves_through_its_root_port(name: str, built: Built) -> None:
    root = built(name)
    fns = pci_functions(root)
    assert fns
    node_cpus = {
        n: cpus_of(root / f"sys/devices/system/node/node{n}/cpulist")
        for n in range(EXPECTED[name].numa)
    }
    for bdf, fn in fns.items():
        assert BDF.match(bdf)
        assert fn.chain[-1] == bdf
        assert ROOT_DIR.match(fn.chain[0]), fn.chain
        root_bus = fn.chain[0][3:]  # "pci0000:15" -> "0000:15"
        port = fns[fn.chain[1]]
        assert port.is_bridge, f"{bdf}: {fn.chain[1]} is not a bridge"
        assert port.bdf.startswith(root_bus + ":"), f"{bdf}: {port.bdf} is not on {root_bus}"
        assert len(fn.chain) >= 2
        for bridge in fn.chain[1:-1]:
            assert fns[bridge].is_bridge
        numa = read_int(fn.real / "numa_node")
        assert numa == read_int(port.real / "numa_node")
        assert cpus_of(fn.real / "local_cpulist") == node_cpus[numa]
        affinity = root / f"sys/devices/{fn.chain[0]}/pci_bus/{root_bus}/cpulistaffinity"
        assert cpus_of(affinity) == node_cpus[numa]
        driver = fn.real / "driver"
        assert driver.is_symlink()
        assert (Path(os.path.realpath(driver)) / bdf).is_symlink()


@pytest.mark.parametrize("name", PCI)
def test_each_nic_shares_a_switch_with_exactly_one_gpu(name: str, built: Built) -> None:
    want = EXPECTED[name]
    fns = pci_functions(built(name))
    gpus = [f for f in fns.values() if f.is_gpu]
    nics = [f for f in fns.values() if f.is_nic_pf]
    assert (len(gpus), len(nics)) == (want.gpus, want.nics)
    # chain: (pcieRoot, root port, switch upstream port, switch downstream port, ...)
    upstream_of_gpu = {g.chain[2]: g for g in gpus}
    assert len(upstream_of_gpu) == len(gpus), "every GPU has its own switch"
    paired = set()
    for nic in nics:
        gpu = upstream_of_gpu[nic.chain[2]]
        assert fns[nic.chain[2]].is_bridge
        assert gpu.chain[0] == nic.chain[0], "same pcieRoot"
        assert gpu.chain[3] != nic.chain[3], "different downstream ports"
        paired.add(gpu.bdf)
    assert len(paired) == len(gpus)
    per_node: dict[int, int] = {}
    for gpu in gpus:
        node = read_int(gpu.real / "numa_node")
        per_node[node] = per_node.get(node, 0) + 1
    assert per_node == {0: 4, 1: 4}


def test_dgx_h100_naming_follows_the_user_guide(built: Built) -> None:
    root = built("dgx-h100")
    table = [
        ("ibp24s0", "mlx5_0"), ("ibp64s0", "mlx5_3"), ("ibp79s0", "mlx5_4"),
        ("ibp94s0", "mlx5_5"), ("ibp154s0", "mlx5_6"), ("ibp192s0", "mlx5_9"),
        ("ibp206s0", "mlx5_10"), ("ibp220s0", "mlx5_11"),
    ]  # fmt: skip
    fns = pci_functions(root)
    for ifname, ibdev in table:
        nic = Path(os.path.realpath(root / f"sys/class/net/{ifname}/device"))
        assert Path(os.path.realpath(root / f"sys/class/infiniband/{ibdev}/device")) == nic
        assert read(nic / "vendor") == "0x15b3"
        assert read(nic / "device") == "0x1021"
        assert read(root / f"sys/class/net/{ifname}/type") == "32"
        bus = int(ifname[3:].split("s")[0])
        gpu = fns[f"0000:{bus + 3:02x}:00.0"]
        assert (gpu.vendor, gpu.device, gpu.klass) == (0x10DE, 0x2330, 0x030200)
        assert gpu.chain[2] == fns[nic.name].chain[2]


def test_mi300x_paths_match_the_amd_platform_table(built: Built) -> None:
    fns = pci_functions(built("mi300x-8gpu-8ainic"))
    gpu0, nic0 = fns["0000:05:00.0"], fns["0000:09:00.0"]
    assert gpu0.chain == (
        "pci0000:00", "0000:00:01.1", "0000:01:00.0", "0000:02:00.0",
        "0000:03:00.0", "0000:04:00.0", "0000:05:00.0",
    )  # fmt: skip
    assert nic0.chain == (
        "pci0000:00",
        "0000:00:01.1",
        "0000:01:00.0",
        "0000:02:01.0",
        "0000:09:00.0",
    )
    assert (gpu0.vendor, gpu0.device, gpu0.klass) == (0x1002, 0x74A1, 0x120000)
    assert fns["0000:e7:00.0"].chain[0] == "pci0000:e0"
    assert read_int(fns["0000:e7:00.0"].real / "numa_node") == 1


@pytest.mark.parametrize("name", AINIC)
def test_ainic_pfs_carry_identity_sriov_netdev_and_rdma(name: str, built: Built) -> None:
    root, want = built(name), EXPECTED[name]
    fns = pci_functions(root)
    pfs = [f for f in fns.values() if (f.vendor, f.device) == (PENSANDO, IONIC_PF)]
    assert len(pfs) == want.nics
    for i, pf in enumerate(pfs):
        assert read(pf.real / "subsystem_vendor") == "0x1dd8"
        assert read(pf.real / "subsystem_device") == "0x5201"
        assert pf.klass == 0x020000
        assert os.path.basename(os.path.realpath(pf.real / "driver")) == "ionic"
        assert read_int(pf.real / "sriov_totalvfs") >= want.vfs_per_nic
        assert read_int(pf.real / "sriov_numvfs") == want.vfs_per_nic
        assert read(pf.real / "sriov_vf_device") == "1003"
        (ifname,) = [p.name for p in (pf.real / "net").iterdir()]
        netdev = root / "sys/class/net" / ifname
        assert Path(os.path.realpath(netdev / "device")) == pf.real
        assert read(netdev / "operstate") == "up"
        assert read_int(netdev / "speed") == 400_000
        assert read_int(netdev / "mtu") == 9000
        assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", read(netdev / "address"))
        (ibdev,) = [p.name for p in (pf.real / "infiniband").iterdir()]
        assert ibdev == f"ionic_{i}"  # kernel naming, in PCI order
        ib = root / "sys/class/infiniband" / ibdev
        assert Path(os.path.realpath(ib / "device")) == pf.real
        assert read(ib / "ports/1/link_layer") == "Ethernet"
        assert read(ib / "ports/1/gid_attrs/ndevs/0") == ifname
        uverbs = [
            u for u in (root / "sys/class/infiniband_verbs").iterdir() if read(u / "ibdev") == ibdev
        ]
        assert len(uverbs) == 1
        assert Path(os.path.realpath(uverbs[0] / "device")) == pf.real


def test_sriov_vfs_link_both_ways(built: Built) -> None:
    root = built("h200-8gpu-8ainic-sriov")
    fns = pci_functions(root)
    pfs = [f for f in fns.values() if (f.vendor, f.device) == (PENSANDO, IONIC_PF)]
    vfs = [f for f in fns.values() if (f.vendor, f.device) == (PENSANDO, IONIC_VF)]
    assert len(vfs) == 4 * len(pfs)
    for pf in pfs:
        for i in range(4):
            vf_dir = Path(os.path.realpath(pf.real / f"virtfn{i}"))
            vf = fns[vf_dir.name]
            assert vf.is_vf
            assert not vf.is_gpu
            assert Path(os.path.realpath(vf.real / "physfn")) == pf.real
            assert vf.chain[:-1] == pf.chain[:-1], "VFs sit beside their PF"
            assert read(vf.real / "numa_node") == read(pf.real / "numa_node")
            (ifname,) = [p.name for p in (vf.real / "net").iterdir()]
            assert Path(os.path.realpath(root / f"sys/class/net/{ifname}/device")) == vf.real
        assert not (pf.real / "virtfn4").exists()
    assert len(
        {read(v.real / "net" / next((v.real / "net").iterdir()).name / "address") for v in vfs}
    ) == len(vfs), "VF MACs are unique"


@pytest.mark.parametrize("name", PCI)
def test_class_net_entries_point_at_pci_functions(name: str, built: Built) -> None:
    root = built(name)
    for entry in sorted((root / "sys/class/net").iterdir()):
        assert entry.is_symlink()
        real = os.path.realpath(entry)
        if entry.name == "lo":
            assert "/sys/devices/virtual/net/" in real
            continue
        assert "/net/" in real
        device = Path(os.path.realpath(entry / "device"))
        assert BDF.match(device.name)
        for attr in ("address", "mtu", "operstate", "speed", "ifindex"):
            assert (entry / attr).is_file()
    ifindexes = [read_int(p / "ifindex") for p in (root / "sys/class/net").iterdir()]
    assert len(set(ifindexes)) == len(ifindexes)


# -- fake NVML -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NVIDIA)
def test_nvml_description_matches_the_sysfs_gpus(name: str, built: Built) -> None:
    root = built(name)
    raw = json.loads(read(root / "drakit-sim/nvml.json"))
    assert (raw["kind"], raw["version"]) == ("NvmlDescription", 1)
    desc = load_nvml_description(root)
    fns = pci_functions(root)
    sysfs_gpus = sorted(bdf for bdf, f in fns.items() if f.vendor == 0x10DE and f.is_gpu)
    assert [g.pci_bus_id for g in desc.devices] == sysfs_gpus
    assert [g.index for g in desc.devices] == list(range(8))
    assert len({g.uuid for g in desc.devices}) == 8
    for gpu in desc.devices:
        assert gpu.architecture == "Hopper"
        assert gpu.cuda_compute_capability == (9, 0)
        assert gpu.mig_capable
        assert gpu.nvml_bus_id == "0000" + gpu.pci_bus_id.upper()
        assert ("H200" in gpu.name) == ("h200" in name)
    assert desc.cuda_driver_version == 13000


def test_non_nvidia_profiles_have_no_nvml_description(built: Built) -> None:
    assert not (built("mi300x-8gpu-8ainic") / "drakit-sim/nvml.json").exists()
    with pytest.raises(FileNotFoundError):
        load_nvml_description(built("mi300x-8gpu-8ainic"))


def test_nvml_uuids_are_stable_across_builds(sim_base: Path, built: Built) -> None:
    again = build_profile("dgx-h100", sim_base / "dgx-again")
    try:
        assert load_nvml_description(again) == load_nvml_description(built("dgx-h100"))
    finally:
        shutil.rmtree(again)


# -- custom specs ----------------------------------------------------------------------------


def _tiny_cpu() -> CpuSpec:
    cache = CacheSpec(size_kib=32, ways=8)
    return CpuSpec(
        model_name="test", vendor_id="GenuineIntel", cpu_family=6, model=1, sockets=1,
        cores_per_socket=2, threads_per_core=1, cores_per_l3=2, l1d=cache, l1i=cache,
        l2=cache, l3=cache,
    )  # fmt: skip


def _endpoint(address: str) -> PciDeviceSpec:
    return PciDeviceSpec(address=address, vendor=0x8086, device=0x1, class_code=0x020000)


def test_custom_spec_without_smt(tmp_path: Path) -> None:
    spec = MachineSpec(
        name="custom",
        description="custom",
        cpu=_tiny_cpu(),
        pci_roots=(PciRootSpec(bus=0, numa_node=-1, children=(_endpoint("0000:00:02.0"),)),),
    )
    root = SysfsBuilder(spec).build(tmp_path / "r")
    assert read(root / "sys/devices/system/cpu/smt/control") == "notsupported"
    fn = pci_functions(root)["0000:00:02.0"]
    assert fn.chain == ("pci0000:00", "0000:00:02.0")
    assert read(fn.real / "numa_node") == "-1"
    assert cpus_of(fn.real / "local_cpulist") == {0, 1}


def test_duplicate_pci_address_is_rejected(tmp_path: Path) -> None:
    spec = MachineSpec(
        name="dup",
        description="dup",
        cpu=_tiny_cpu(),
        pci_roots=(
            PciRootSpec(bus=0, numa_node=0, children=(_endpoint("0000:00:02.0"),)),
            PciRootSpec(bus=0x80, numa_node=0, children=(_endpoint("0000:00:02.0"),)),
        ),
    )
    with pytest.raises(SimSpecError, match=re.escape("0000:00:02.0")):
        SysfsBuilder(spec).build(tmp_path / "r")


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(SimSpecError, match=re.escape("not DDDD:BB:DD.F")):
        _endpoint("0000:1B:00.0")
    with pytest.raises(SimSpecError, match="children"):
        PciDeviceSpec(
            address="0000:00:01.0", vendor=1, device=1, class_code=0x020000,
            children=(_endpoint("0000:01:00.0"),),
        )  # fmt: skip
    cache = CacheSpec(size_kib=32, ways=8)
    with pytest.raises(SimSpecError, match="NUMA"):
        CpuSpec(
            model_name="x", vendor_id="GenuineIntel", cpu_family=6, model=1, sockets=1,
            cores_per_socket=6, numa_nodes_per_socket=4, cores_per_l3=6, l1d=cache, l1i=cache,
            l2=cache, l3=cache,
        )  # fmt: skip


def test_sim_list_names_device_kinds_by_pci_class() -> None:
    """An accelerator that is no display controller is not called a GPU (issue 31)."""
    mi300x = profile_info("mi300x-8gpu-8ainic")
    assert mi300x.kinds == {"NIC": 8, "processing accelerator": 8}
    assert "8 processing accelerators" in str(mi300x)
    assert "GPU" not in str(mi300x).split("[", 1)[1]
    h200 = profile_info("h200-8gpu-8ainic")
    assert h200.kinds == {"NIC": 8, "GPU": 8}
    assert "8 GPUs, 0 VFs]" in str(h200)
    assert profile_info("minimal-1s").kinds == {}
