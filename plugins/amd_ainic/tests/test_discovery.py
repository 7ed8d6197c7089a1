"""AINIC discovery on every AINIC profile: modes, attributes mapped through sysfs, rails."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from drakit.errors import ConfigInvalid
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.models import Device, NodeInfo
from drakit.sim import build_profile
from drakit.testing import SimNode, build_sim_node, open_host
from drakit.testing.plugin import SimNodeFactory

AINIC_PROFILES = {  # profile -> VFs per PF
    "mi300x-8gpu-8ainic": 0,
    "mi300x-8gpu-8ainic-16vf": 16,
    "h200-8gpu-8ainic": 0,
    "h200-8gpu-8ainic-sriov": 4,
}
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
NUMA = "resource.kubernetes.io/numaNode"

Discover = Callable[..., dict[str, Device]]


@pytest.fixture(scope="module")
def nodes() -> Iterator[dict[str, SimNode]]:
    """One simulated node per AINIC profile, shared by the module (read-only)."""
    with tempfile.TemporaryDirectory(prefix="drakit-ainic-disc-", dir=fast_tmp()) as tmp:
        yield {
            name: build_sim_node(name, Path(tmp) / name, node_name="n1") for name in AINIC_PROFILES
        }


@pytest.fixture(scope="module")
def roots(nodes: dict[str, SimNode]) -> dict[str, Path]:
    return {name: node.root for name, node in nodes.items()}


@pytest.fixture
def discover(nodes: dict[str, SimNode], tmp_path: Path) -> Discover:
    def run(profile: str, **ainic: Any) -> dict[str, Device]:
        with open_host({"plugins": {"amd_ainic": ainic}}, nodes[profile]) as host:
            return {k.device: d for k, d in host.discover().devices.items()}

    return run


def attrs(dev: Device) -> dict[str, Any]:
    return {k: v.value for k, v in dev.attributes.items()}


def real(root: Path, bdf: str) -> Path:
    return Path(os.path.realpath(root / "sys/bus/pci/devices" / bdf))


@pytest.mark.parametrize("profile", sorted(AINIC_PROFILES))
def test_pf_mode_maps_every_attribute_through_sysfs(
    profile: str, discover: Discover, roots: dict[str, Path]
) -> None:
    root = roots[profile]
    devs = discover(profile)
    assert sorted(devs) == [f"ainic-{i}" for i in range(8)]
    bdfs = [attrs(d)[PCI_BUS_ID] for d in devs.values()]
    assert bdfs == sorted(bdfs), "ainic-<n> is PCI order"
    for dev in devs.values():
        a = attrs(dev)
        d = real(root, str(a[PCI_BUS_ID]))
        assert a["type"] == "pf"
        assert a["model"] == "Pollara 400"
        assert (a["pciVendorID"], a["pciDeviceID"]) == ("1dd8", "1002")
        assert a[PCIE_ROOT] == d.relative_to((root / "sys/devices").resolve()).parts[0]
        assert a[NUMA] == int((d / "numa_node").read_text())
        (ifname,) = os.listdir(d / "net")
        assert a["ifName"] == a["pfName"] == ifname
        net = root / "sys/class/net" / ifname
        assert a["mac"] == (net / "address").read_text().strip()
        assert a["mtu"] == int((net / "mtu").read_text())
        assert a["linkSpeedGbps"] == int((net / "speed").read_text()) // 1000
        (ibdev,) = os.listdir(d / "infiniband")
        assert a["rdmaDevice"] == ibdev
        assert a["rdma"] is True
        assert a["firmwareVersion"] == (d / "infiniband" / ibdev / "fw_ver").read_text().strip()
        assert a["kernelDriver"] == "ionic"
        assert a["sriovTotalVFs"] == int((d / "sriov_totalvfs").read_text())
        queues = len([q for q in os.listdir(net / "queues") if q.startswith("rx-")])
        assert dev.capacity["queues"].value == str(queues)
        assert dev.capacity["bandwidth"].value == "400"
        assert dev.allow_multiple_allocations is None


@pytest.mark.parametrize("profile", [p for p, n in sorted(AINIC_PROFILES.items()) if n])
def test_vf_mode_publishes_each_vf_with_its_own_rdma_device(
    profile: str, discover: Discover, roots: dict[str, Path]
) -> None:
    root, per = roots[profile], AINIC_PROFILES[profile]
    devs = discover(profile, default_mode="vf")
    assert len(devs) == 8 * per
    pfs = {attrs(d)[PCI_BUS_ID]: attrs(d) for d in discover(profile).values()}
    rdma = set()
    for name, dev in devs.items():
        a = attrs(dev)
        pf = pfs[str(a["pfPciAddress"])]
        assert name == f"{'-'.join(name.split('-')[:2])}-vf-{a['vfIndex']}"
        assert a["type"] == "vf"
        assert a["pciDeviceID"] == "1003"
        vf_dir = real(root, str(a[PCI_BUS_ID]))
        pf_dir = real(root, str(a["pfPciAddress"]))
        assert Path(os.path.realpath(pf_dir / f"virtfn{a['vfIndex']}")) == vf_dir
        assert a[PCIE_ROOT] == pf[PCIE_ROOT], "a VF inherits its PF's root complex"
        assert a[NUMA] == pf[NUMA]
        assert a["pfName"] == pf["ifName"]
        (ibdev,) = os.listdir(vf_dir / "infiniband")
        assert a["rdmaDevice"] == ibdev
        rdma.add(ibdev)
        assert dev.capacity["queues"].value == "4"
    assert len(rdma) == len(devs)


def test_shared_mode_capacities_and_request_policies(discover: Discover) -> None:
    devs = discover("h200-8gpu-8ainic", default_mode="shared", vf_limit=6)
    dev = devs["ainic-0"]
    assert dev.allow_multiple_allocations is True
    assert attrs(dev)["type"] == "shared"
    caps = {k: c.model_dump(by_alias=True, exclude_none=True) for k, c in dev.capacity.items()}
    assert caps == {
        "queues": {
            "value": "16",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "16"}},
        },
        "bandwidth": {
            "value": "400",
            "requestPolicy": {"default": "10", "validRange": {"min": "1", "max": "400"}},
        },
        "vfs": {"value": "6", "requestPolicy": {"default": "1", "validValues": ("1",)}},
    }
    # existing VFs are the pool as they are; none are created on demand there
    pooled = discover("h200-8gpu-8ainic-sriov", default_mode="shared", vf_limit=6)
    assert pooled["ainic-0"].capacity["vfs"].value == "4"


def test_mixed_modes_by_address_glob_and_name(discover: Discover) -> None:
    devs = discover(
        "h200-8gpu-8ainic-sriov",
        default_mode="none",
        nics=[
            {"select": {"pci_addresses": ["0000:18:00.0"]}, "mode": "pf"},
            {"select": {"if_names": ["enp6*"]}, "mode": "vf"},  # enp64s0
            {"select": {"pf_names": ["enp79s0", "enp94s0"]}, "mode": "shared"},
        ],
    )
    types = {n: attrs(d)["type"] for n, d in devs.items()}
    assert types == {
        "ainic-0": "pf",
        **{f"ainic-1-vf-{i}": "vf" for i in range(4)},
        "ainic-2": "shared",
        "ainic-3": "shared",
    }


def test_a_pf_selected_twice_is_an_error_naming_both_rules(discover: Discover) -> None:
    with pytest.raises(ConfigInvalid) as e:
        discover(
            "h200-8gpu-8ainic",
            nics=[
                {"select": {"if_names": ["enp*"]}, "mode": "shared"},
                {"select": {"pci_addresses": ["0000:40:00.0"]}, "mode": "pf"},
            ],
        )
    msg = str(e.value)
    assert "plugins.amd_ainic.nics[1].select" in msg
    assert "0000:40:00.0" in msg
    assert "nics[0] and plugins.amd_ainic.nics[1]" in msg


@pytest.mark.parametrize(
    ("rule", "path", "fix"),
    [
        ({"select": {}, "mode": "pf"}, "nics[0].select", "set pci_addresses, if_names or pf_names"),
        (
            {"select": {"pci_addresses": ["18:00.0"]}, "mode": "pf"},
            "nics[0].select.pci_addresses",
            "e.g. 0000:18:00.0",
        ),
        ({"select": {"pf_names": ["enp24s0"]}, "mode": "half"}, "nics[0].mode", "half"),
    ],
)
def test_bad_rules_are_rejected_naming_the_field(
    rule: dict[str, Any], path: str, fix: str, drakit_sim_node: SimNodeFactory
) -> None:
    with pytest.raises(ConfigInvalid) as e:
        open_host({"plugins": {"amd_ainic": {"nics": [rule]}}}, drakit_sim_node("minimal-1s"))
    assert f"plugins.amd_ainic.{path}" in str(e.value)
    assert fix in str(e.value)


def test_rails_and_fabric_from_map_and_file(discover: Discover, tmp_path: Path) -> None:
    topo = tmp_path / "topology.json"
    topo.write_text(
        json.dumps({"0000:40:00.0": {"rail": 1, "fabric": "spine-b"}, "enp79s0": {"rail": 2}})
    )
    devs = discover(
        "h200-8gpu-8ainic",
        rails={"enp24s0": 0},
        fabric="pod-a",
        topology_file=str(topo),
    )
    got = {n: (attrs(d).get("rail"), attrs(d).get("fabric")) for n, d in devs.items()}
    assert got["ainic-0"] == (0, "pod-a")
    assert got["ainic-1"] == (1, "spine-b")
    assert got["ainic-2"] == (2, "pod-a")
    assert got["ainic-3"] == (None, "pod-a")


def test_nothing_published_without_ainics(tmp_path: Path, drakit_sim_node: SimNodeFactory) -> None:
    config: dict[str, Any] = {"plugins": {"amd_ainic": {}}}
    with open_host(config, drakit_sim_node("dgx-h100", node_name="n")) as host:
        assert not host.discover().devices


def test_the_mixed_modes_example_loads_and_publishes(
    nodes: dict[str, SimNode], tmp_path: Path
) -> None:
    example = Path(__file__).parent.parent / "examples" / "mixed-modes.yaml"
    raw = yaml.safe_load(example.read_text())
    with open_host(raw, nodes["h200-8gpu-8ainic-sriov"]) as host:
        devs = {k.device: attrs(d) for k, d in host.discover().devices.items()}
    assert {n: a["type"] for n, a in devs.items()} == {
        "ainic-0": "shared",
        "ainic-1": "shared",
        **{f"ainic-2-vf-{i}": "vf" for i in range(4)},
        "ainic-3": "pf",
        "ainic-4": "pf",
        "ainic-5": "pf",
        "ainic-6": "pf",
    }
    assert "ainic-7" not in devs, "left to the device plugin"
    assert devs["ainic-6"]["rail"] == 6
    assert {a["fabric"] for a in devs.values()} == {"cluster-a-rdma"}


def test_rediscovery_reads_again_what_can_change_and_reuses_what_cannot(tmp_path: Path) -> None:
    """A running plugin's next round: unchanged VFs are the same objects, changes show."""
    root = build_profile("h200-8gpu-8ainic-sriov", tmp_path / "r")
    host = PluginHost(
        DrakitSettings(state_dir=tmp_path, plugins={"amd_ainic": {"default_mode": "vf"}}),
        NodeInfo(name="n1", sysfs_root=str(root)),
    )

    def round_() -> dict[str, Device]:
        return {k.device: d for k, d in host.discover().devices.items()}

    first = round_()
    again = round_()
    assert all(again[n] is first[n] for n in first), "unchanged devices are rebuilt"
    a = attrs(first["ainic-0-vf-1"])
    vf = real(root, str(a[PCI_BUS_ID]))
    net = vf / "net" / str(a["ifName"])
    (net / "mtu").write_text("4000\n")
    (net / "address").write_text("02:00:00:00:00:99\n")
    for q in ("rx-3", "tx-3"):
        (net / "queues" / q).rmdir()
    (ibdev,) = os.listdir(vf / "infiniband")
    (vf / "infiniband" / ibdev / "fw_ver").write_text("9.9.9\n")  # same device: not re-read
    changed = round_()
    b = attrs(changed["ainic-0-vf-1"])
    assert (b["mtu"], b["mac"]) == (4000, "02:00:00:00:00:99")
    assert changed["ainic-0-vf-1"].capacity["queues"].value == "3"
    assert b["firmwareVersion"] == a["firmwareVersion"]
    assert changed["ainic-0-vf-2"] is first["ainic-0-vf-2"]
    # the RDMA driver rebinds: a new device directory, so uverbs and firmware are read again
    (vf / "infiniband" / ibdev).rename(tmp_path / "old-ib")
    (vf / "infiniband" / ibdev).mkdir()
    (vf / "infiniband" / ibdev / "fw_ver").write_text("9.9.9\n")
    assert attrs(round_()["ainic-0-vf-1"])["firmwareVersion"] == "9.9.9"
    # the driver unbinds the VF's netdev: no ifName any more
    (vf / "net" / str(a["ifName"])).rename(tmp_path / "old-net")
    assert "ifName" not in attrs(round_()["ainic-0-vf-1"])


def test_rediscovery_reads_a_class_link_made_again_under_another_function() -> None:
    """A netdev gone from one VF and made again, with the same name, under another: moved.

    The tree is on tmpfs, which like sysfs (kernfs numbers its nodes cyclically) never gives a
    new link the inode of one just removed; ext4, under ``tmp_path``, does.
    """
    with tempfile.TemporaryDirectory(prefix="drakit-ainic-relink-", dir=fast_tmp()) as tmp:
        root = build_profile("h200-8gpu-8ainic-sriov", Path(tmp) / "r")
        host = PluginHost(
            DrakitSettings(state_dir=Path(tmp), plugins={"amd_ainic": {"default_mode": "vf"}}),
            NodeInfo(name="n1", sysfs_root=str(root)),
        )
        names = ("ainic-0-vf-1", "ainic-0-vf-2")

        def devices() -> dict[str, Device]:
            return {k.device: d for k, d in host.discover().devices.items()}

        def if_names() -> dict[str, object]:
            devs = devices()
            return {n: attrs(devs[n]).get("ifName") for n in names}

        devs = devices()
        one, two = (str(attrs(devs[n])["ifName"]) for n in names)
        vf1, vf2 = (real(root, str(attrs(devs[n])[PCI_BUS_ID])) for n in names)
        cls = root / "sys" / "class" / "net"
        (cls / two).unlink()  # vf2's netdev goes
        (vf2 / "net" / two).rename(Path(tmp) / "gone")
        (cls / one).unlink()  # vf1's goes, and a netdev of that name comes under vf2
        (vf1 / "net" / one).rename(vf2 / "net" / one)
        (cls / one).symlink_to(os.path.relpath(vf2 / "net" / one, cls))
        assert if_names() == {"ainic-0-vf-1": None, "ainic-0-vf-2": one}


def test_uverbs_node_is_the_rdma_devices_whatever_else_the_function_holds(
    tmp_path: Path,
) -> None:
    """A lone uverbs node of a lone RDMA device is its; beside others, its ``ibdev`` decides."""
    root = build_profile("h200-8gpu-8ainic-sriov", tmp_path / "r")

    def function(device: str) -> Any:
        host = PluginHost(  # a fresh plugin: nothing cached from an earlier round
            DrakitSettings(state_dir=tmp_path, plugins={"amd_ainic": {"default_mode": "vf"}}),
            NodeInfo(name="n1", sysfs_root=str(root)),
        )
        host.discover()
        return host.backends["amd_ainic"].published[device].function  # type: ignore[attr-defined]

    before = function("ainic-0-vf-1")
    assert before.uverbs is not None
    vf = real(root, before.bdf)
    # a second RDMA device (sorting after the first, so still not the published one) whose
    # uverbs node sorts before the first device's
    other_ib, other_uv = "zzz_other", "uverbs0000"
    (vf / "infiniband" / other_ib).mkdir()
    (vf / "infiniband_verbs" / other_uv).mkdir()
    (vf / "infiniband_verbs" / other_uv / "ibdev").write_text(f"{other_ib}\n")
    cls = root / "sys" / "class"
    for kind, name in (("infiniband", other_ib), ("infiniband_verbs", other_uv)):
        (cls / kind / name).symlink_to(os.path.relpath(vf / kind / name, cls / kind))
    after = function("ainic-0-vf-1")
    assert after.rdma_device == before.rdma_device
    assert after.uverbs == before.uverbs, "the uverbs node was chosen by position"


def test_rails_and_fabric_from_node_labels_under_the_file_and_maps(
    roots: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps({"enp24s0": {"rail": 7}, "enp64s0": {"rail": 7}}))
    labels = {
        "ainic.drakit.io/rail.enp24s0": "4",  # over the file
        "ainic.drakit.io/rail.enp79s0": "5",
        "ainic.drakit.io/rail.enp94s0": "5",  # under the static map
        "ainic.drakit.io/rail.enp154s0": "two",  # bad: skipped, with a warning naming it
        "ainic.drakit.io/fabric.enp79s0": "spine-b",
        "ainic.drakit.io/fabric": "pod-a",
        "other.example.com/rail.enp64s0": "9",  # another prefix: not ours
    }
    host = PluginHost(
        DrakitSettings(
            plugins={
                "amd_ainic": {
                    "topology_file": str(topo),
                    "rails": {"enp94s0": 0},
                }
            }
        ),
        NodeInfo(name="n1", sysfs_root=str(roots["h200-8gpu-8ainic"]), labels=labels),
    )
    devs = {k.device: d for k, d in host.discover().devices.items()}
    got = {
        n: (attrs(d)["ifName"], attrs(d).get("rail"), attrs(d).get("fabric"))
        for n, d in devs.items()
    }
    assert got["ainic-0"] == ("enp24s0", 4, "pod-a")
    assert got["ainic-1"] == ("enp64s0", 7, "pod-a")
    assert got["ainic-2"] == ("enp79s0", 5, "spine-b")
    assert got["ainic-3"] == ("enp94s0", 0, "pod-a")
    assert got["ainic-4"] == ("enp154s0", None, "pod-a")
    assert "ainic.drakit.io/rail.enp154s0='two'" in caplog.text
    # the next round sees the labels of that round: a relabelled NIC moves rail
    host.node = host.node.model_copy(update={"labels": {"ainic.drakit.io/rail.enp24s0": "6"}})
    again = {k.device: d for k, d in host.discover().devices.items()}
    assert (attrs(again["ainic-0"])["rail"], attrs(again["ainic-0"]).get("fabric")) == (6, None)


@pytest.mark.parametrize("bad", ["99999999999999999999", "\u00b2", "\u0663", "1" * 63, "-1"])
def test_a_rail_label_out_of_range_is_skipped_and_named_not_fatal(
    roots: dict[str, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    """Issue 30, class 3: values the API server accepts for a label but no rail can be."""
    labels = {"ainic.drakit.io/rail.enp24s0": bad, "ainic.drakit.io/rail.enp64s0": "3"}
    host = PluginHost(
        DrakitSettings(state_dir=tmp_path, plugins={"amd_ainic": {}}),
        NodeInfo(name="n1", sysfs_root=str(roots["h200-8gpu-8ainic"]), labels=labels),
    )
    devs = {k.device: attrs(d) for k, d in host.discover().devices.items()}
    assert devs["ainic-0"].get("rail") is None
    assert devs["ainic-1"]["rail"] == 3  # the good label still applies
    assert "ainic.drakit.io/rail.enp24s0=" in caplog.text
    assert "a rail is a whole number from 0 to 999999999" in caplog.text


def test_one_nic_with_an_attribute_drakit_refuses_is_skipped_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30, class 3: a netdev name over 64 bytes (a DRA string attribute's limit)."""
    root = build_profile("h200-8gpu-8ainic", tmp_path / "r")
    net = real(root, "0000:18:00.0") / "net"
    [old] = os.listdir(net)
    os.rename(net / old, net / ("x" * 70))
    host = PluginHost(
        DrakitSettings(state_dir=tmp_path / "s", plugins={"amd_ainic": {}}),
        NodeInfo(name="n1", sysfs_root=str(root)),
    )
    names = {k.device for k in host.discover().devices}
    assert "ainic-0" not in names
    assert {f"ainic-{i}" for i in range(1, 8)} <= names
    assert "ainic-0 (0000:18:00.0) is not published:" in caplog.text
    assert "at most 64 are allowed" in caplog.text


def test_node_labels_off_or_a_bad_prefix(discover: Discover) -> None:
    with pytest.raises(ConfigInvalid) as e:
        discover("h200-8gpu-8ainic", node_labels="Not A Prefix")
    assert "plugins.amd_ainic.node_labels" in str(e.value)
    assert "DNS subdomain" in str(e.value)


def test_rediscovery_follows_the_virtfn_links(tmp_path: Path) -> None:
    root = build_profile("h200-8gpu-8ainic-sriov", tmp_path / "r")
    host = PluginHost(
        DrakitSettings(state_dir=tmp_path, plugins={"amd_ainic": {"default_mode": "vf"}}),
        NodeInfo(name="n1", sysfs_root=str(root)),
    )

    def names() -> set[str]:
        return {k.device for k in host.discover().devices if k.device.startswith("ainic-0-")}

    assert names() == {f"ainic-0-vf-{i}" for i in range(4)}
    pf = real(root, "0000:18:00.0")
    target = os.readlink(pf / "virtfn3")
    (pf / "virtfn3").unlink()  # the VF goes away
    assert names() == {f"ainic-0-vf-{i}" for i in range(3)}
    os.symlink(target, pf / "virtfn3")  # and comes back: a new link, read again
    assert names() == {f"ainic-0-vf-{i}" for i in range(4)}


def _node_labels(root: Path, labels: dict[str, str], **ainic: Any) -> dict[str, str]:
    """What the backend asks core to label the Node with after one discovery round."""
    host = PluginHost(
        DrakitSettings(plugins={"amd_ainic": ainic}),
        NodeInfo(name="n1", sysfs_root=str(root), labels=labels),
    )
    disc = host.discover()
    return host.node_labels({"amd_ainic": disc.devices}).get("amd_ainic", {})


def test_node_labels_name_the_fabric_and_count_its_rails(roots: dict[str, Path]) -> None:
    root = roots["h200-8gpu-8ainic"]
    labels = {
        "ainic.drakit.io/fabric": "pod-a",
        "ainic.drakit.io/rail.enp24s0": "0",
        "ainic.drakit.io/rail.enp64s0": "1",
        "ainic.drakit.io/rail.enp79s0": "1",  # two NICs on rail 1: still two rails
    }
    assert _node_labels(root, labels) == {
        "topology.drakit.io/fabric": "pod-a",
        "topology.drakit.io/rails": "2",
    }
    # the same sources as the attributes: the static map over the labels
    assert _node_labels(root, labels, fabric="pod-b", rails={"enp94s0": 5}) == {
        "topology.drakit.io/fabric": "pod-b",
        "topology.drakit.io/rails": "3",
    }
    # no fabric, no rails: nothing to label
    assert _node_labels(root, {}) == {}


def test_nics_in_two_fabrics_give_no_fabric_label(
    roots: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    labels = {"ainic.drakit.io/fabric": "pod-a", "ainic.drakit.io/fabric.enp24s0": "pod-b"}
    assert _node_labels(roots["h200-8gpu-8ainic"], labels) == {}
    assert "fabrics pod-a, pod-b: no topology.drakit.io/fabric label" in caplog.text
