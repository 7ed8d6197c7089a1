"""PCI helpers in :mod:`drakit.sysfs`, read from built simulated trees like a real ``/sys``.

Expected values are worked out independently: the PCIe root is recomputed from
``os.path.realpath`` of the ``/sys/bus/pci/devices`` link, as the upstream Go helper does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drakit.host.startup import fast_tmp
from drakit.sim import MachineSpec, PciDeviceSpec, PciRootSpec, SysfsBuilder, get_profile
from drakit.sysfs import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    PciFunction,
    pci_distance,
    read_pci_functions,
    standard_pci_attributes,
)

NVIDIA, PENSANDO = 0x10DE, 0x1DD8
BRIDGE, ETHERNET, GPU_3D = 0x060400, 0x020000, 0x030200


def _root_of(root: Path, bdf: str) -> str:
    """The first path element below ``/sys/devices`` of the device's resolved link."""
    real = os.path.realpath(root / "sys" / "bus" / "pci" / "devices" / bdf)
    devices = os.path.realpath(root / "sys" / "devices")
    return Path(real).relative_to(devices).parts[0]


def test_gpus_on_h200_carry_the_standard_attributes(profile_root: Callable[[str], Path]) -> None:
    root = profile_root("h200-8gpu-8ainic")
    gpus = read_pci_functions(root, vendor=NVIDIA)
    assert len(gpus) == 8
    assert [g.bdf for g in gpus] == sorted(g.bdf for g in gpus)
    roots = set()
    for gpu in gpus:
        attrs = standard_pci_attributes(gpu)
        assert attrs[PCI_BUS_ID] == gpu.bdf == gpu.bdf.lower()
        assert attrs[PCIE_ROOT] == _root_of(root, gpu.bdf)
        assert str(attrs[PCIE_ROOT]).startswith("pci0000:")
        assert attrs[NUMA_NODE] == gpu.numa_node
        assert (gpu.class_code, gpu.driver) == (GPU_3D, "nvidia")
        roots.add(attrs[PCIE_ROOT])
    assert len(roots) == 8  # one root complex per GPU on an HGX board
    assert [g.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_nics_on_h200_expose_netdev_rdma_and_sriov(profile_root: Callable[[str], Path]) -> None:
    nics = read_pci_functions(profile_root("h200-8gpu-8ainic"), vendor=PENSANDO)
    assert len(nics) == 8
    for nic in nics:
        assert nic.class_code == ETHERNET
        assert len(nic.netdevs) == 1
        assert len(nic.rdma_devices) == 1
        assert nic.sriov_totalvfs is not None
        assert nic.sriov_numvfs == 0
        assert nic.physfn is None


def test_virtual_functions_point_at_their_pf(profile_root: Callable[[str], Path]) -> None:
    fns = read_pci_functions(profile_root("h200-8gpu-8ainic-sriov"), vendor=PENSANDO)
    pfs = [f for f in fns if f.physfn is None]
    vfs = [f for f in fns if f.physfn is not None]
    assert len(pfs) == 8
    assert {f.sriov_numvfs for f in pfs} == {4}
    assert len(vfs) == 32
    by_pf = {pf.bdf: [vf for vf in vfs if vf.physfn == pf.bdf] for pf in pfs}
    assert {len(v) for v in by_pf.values()} == {4}
    for pf in pfs:
        for vf in by_pf[pf.bdf]:
            assert vf.pcie_root == pf.pcie_root
            assert vf.numa_node == pf.numa_node


def test_vendor_filter_and_empty_root(profile_root: Callable[[str], Path], tmp_path: Path) -> None:
    root = profile_root("h200-8gpu-8ainic")
    every = read_pci_functions(root)
    assert {f.vendor for f in every} >= {NVIDIA, PENSANDO}
    assert read_pci_functions(root, vendor=0x1002) == []  # no AMD GPUs here
    assert read_pci_functions(tmp_path) == []
    assert read_pci_functions(profile_root("minimal-1s")) == []


def test_each_gpus_nearest_nic_is_behind_its_switch(profile_root: Callable[[str], Path]) -> None:
    root = profile_root("h200-8gpu-8ainic")
    gpus = read_pci_functions(root, vendor=NVIDIA)
    nics = read_pci_functions(root, vendor=PENSANDO)
    for gpu in gpus:
        ranked = sorted(nics, key=lambda n: (pci_distance(gpu, n), n.bdf))
        nearest = ranked[0]
        assert nearest.pcie_root == gpu.pcie_root
        assert nearest.chain[:3] == gpu.chain[:3]  # root, root port, switch upstream port
        assert pci_distance(gpu, nearest) < pci_distance(gpu, ranked[1])


# -- distance ordering on a purpose-built tree ---------------------------------------------------


def _fn(
    address: str, class_code: int = ETHERNET, children: tuple[PciDeviceSpec, ...] = ()
) -> PciDeviceSpec:
    return PciDeviceSpec(
        address=address,
        vendor=0x8086 if class_code == BRIDGE else PENSANDO,
        device=0x1234,
        class_code=class_code,
        children=children,
    )


def _bridge(address: str, *children: PciDeviceSpec) -> PciDeviceSpec:
    return _fn(address, BRIDGE, children)


# pci0000:00 ── 00:01.0 (root port) ── 01:00.0 (switch up) ┬ 02:00.0 ── 03:00.0  A
#                                                          └ 02:01.0 ── 04:00.0  B
#            └─ 00:02.0 (root port) ── 05:00.0  C
# pci0000:80 ── 80:01.0 (root port) ── 81:00.0  D          (NUMA node unknown: -1)
TREE = MachineSpec(
    name="pci-distance",
    description="two root complexes, one with a switch; for distance ordering",
    cpu=get_profile("minimal-1s").cpu,
    pci_roots=(
        PciRootSpec(
            bus=0x00,
            numa_node=0,
            children=(
                _bridge(
                    "0000:00:01.0",
                    _bridge(
                        "0000:01:00.0",
                        _bridge("0000:02:00.0", _fn("0000:03:00.0")),
                        _bridge("0000:02:01.0", _fn("0000:04:00.0")),
                    ),
                ),
                _bridge("0000:00:02.0", _fn("0000:05:00.0")),
            ),
        ),
        PciRootSpec(
            bus=0x80, numa_node=-1, children=(_bridge("0000:80:01.0", _fn("0000:81:00.0")),)
        ),
    ),
)


@pytest.fixture(scope="module")
def tree() -> Iterator[dict[str, PciFunction]]:
    """A, B, C and D of ``TREE``, read back from a built tree."""
    base = Path(tempfile.mkdtemp(prefix="drakit-pci-", dir=fast_tmp()))
    try:
        built = SysfsBuilder(TREE).build(base / "root")
        names = {"0000:03:00.0": "A", "0000:04:00.0": "B", "0000:05:00.0": "C", "0000:81:00.0": "D"}
        yield {names[f.bdf]: f for f in read_pci_functions(built, vendor=PENSANDO)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_distance_same_switch_then_same_root_then_other_roots(tree: dict[str, PciFunction]) -> None:
    a, b, c, d = tree["A"], tree["B"], tree["C"], tree["D"]
    assert pci_distance(a, b) < pci_distance(a, c) < pci_distance(a, d)
    assert pci_distance(b, c) == pci_distance(a, c)
    assert pci_distance(a, a) == 0
    for x in tree.values():
        for y in tree.values():
            assert pci_distance(x, y) == pci_distance(y, x)


def test_distance_counts_hops_through_the_common_bridge(tree: dict[str, PciFunction]) -> None:
    a, b, c, d = tree["A"], tree["B"], tree["C"], tree["D"]
    assert a.chain == ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0")
    assert pci_distance(a, b) == 4  # up to 01:00.0 and down again
    assert pci_distance(a, c) == 6  # up to the root complex
    assert pci_distance(a, d) == 5 + 3 + 1  # both chains and one hop through the host


def test_unknown_numa_node_is_omitted(tree: dict[str, PciFunction]) -> None:
    d = tree["D"]
    assert d.numa_node is None
    assert standard_pci_attributes(d) == {PCI_BUS_ID: "0000:81:00.0", PCIE_ROOT: "pci0000:80"}
    assert standard_pci_attributes(tree["A"])[NUMA_NODE] == 0
