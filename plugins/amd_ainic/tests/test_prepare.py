"""Prepare and unprepare through the real pipeline: PFs, VFs, shares, on-demand VFs, repair."""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import AllocatedDevice, ClaimInfo, ClaimRef, NodeInfo
from drakit.prepare.pipeline import DriverState
from drakit.sim import build_profile, get_profile
from drakit.statefiles import StateDir
from drakit.strategy_models import SelectionRequest
from drakit.testing import ClaimStore
from drakit_amd_ainic.ledger import Ledger
from drakit_amd_ainic.sim import SriovKernel, simulated_libraries, vf_settings
from drakit_amd_ainic.strategies import least_loaded

from .conftest import DRIVER, NODE, AinicNode, ainic_node, nic_config

SHARE = {"queues": "4", "bandwidth": "25", "vfs": "1"}


def uverbs_of(root: Path, rdma: str) -> str:
    """The uverbs char device sysfs maps to an RDMA device (what discovery must find)."""
    base = root / "sys/class/infiniband_verbs"
    (name,) = [u for u in os.listdir(base) if (base / u / "ibdev").read_text().strip() == rdma]
    return f"/dev/infiniband/{name}"


def pf_bdf(node: AinicNode, device: str) -> str:
    return node.plugin.published[device].nic.pf.bdf


def test_pf_claim_gets_its_uverbs_rdma_cm_and_env() -> None:
    with ainic_node("h200-8gpu-8ainic") as node:
        ref = node.add("c1", [("nic", "ainic-3", None)])
        res = node.prepare(ref)[ref.uid]
        assert not res.error, res.error
        assert node.device_nodes(ref) == [
            uverbs_of(node.root, "ionic_3"),
            "/dev/infiniband/rdma_cm",
        ]
        env = node.env(ref)
        assert env == {
            "DRAKIT_AINIC_AINIC_3_PCI": "0000:5e:00.0",
            "DRAKIT_AINIC_AINIC_3_IFNAME": "enp94s0",
            "DRAKIT_AINIC_AINIC_3_QUEUES": "0-15",
            "DRAKIT_AINIC_AINIC_3_RDMA_DEVICE": "ionic_3",
            "DRAKIT_AINIC_AINIC_3_UVERBS": uverbs_of(node.root, "ionic_3"),
        }
        assert not node.unprepare(ref)[ref.uid].error


def test_vf_settings_on_a_pf_fail_only_that_claim_naming_the_field() -> None:
    with ainic_node("h200-8gpu-8ainic") as node:
        bad = node.add("bad", [("nic", "ainic-0", None)], [nic_config(vf={"vlan": 10})])
        good = node.add("good", [("nic", "ainic-1", None)])
        res = node.prepare(bad, good)
        assert "NicConfig vf: sets a VF, and this device is a whole PF" in res[bad.uid].error
        assert not res[good.uid].error


def test_vf_mode_applies_vf_settings_and_unprepare_resets_them() -> None:
    with ainic_node("h200-8gpu-8ainic-sriov", default_mode="vf") as node:
        cfg = nic_config(
            vf={
                "mac": "02:AA:00:00:00:01",
                "vlan": 100,
                "trust": True,
                "spoofChk": False,
                "mtu": 4000,
            },
            queues=2,
            bandwidth=50,
        )
        ref = node.add("c1", [("nic", "ainic-2-vf-1", None)], [cfg])
        res = node.prepare(ref)[ref.uid]
        assert not res.error, res.error
        pf = pf_bdf(node, "ainic-2-vf-1")
        assert vf_settings(node.root, pf)[1] == {
            "mac": "02:aa:00:00:00:01",
            "vlan": 100,
            "trust": True,
            "spoofchk": False,
            "max_tx_rate_mbps": 50_000,
        }
        vf_if = node.root / "sys/class/net/enp79s0v1"
        assert (vf_if / "mtu").read_text().strip() == "4000"
        assert sorted(os.listdir(vf_if / "queues")) == ["rx-0", "rx-1", "tx-0", "tx-1"]
        env = node.env(ref)
        assert env["DRAKIT_AINIC_AINIC_2_VF_1_IFNAME"] == "enp79s0v1"
        assert env["DRAKIT_AINIC_AINIC_2_VF_1_RDMA_DEVICE"] == "rocep79s0v1"
        assert node.device_nodes(ref)[0] == uverbs_of(node.root, "rocep79s0v1")
        assert not node.unprepare(ref)[ref.uid].error
        assert vf_settings(node.root, pf)[1] == {
            "mac": "00:00:00:00:00:00",
            "vlan": 0,
            "trust": False,
            "spoofchk": True,
            "max_tx_rate_mbps": 0,
        }
        assert (vf_if / "mtu").read_text().strip() == "9000"
        assert len(os.listdir(vf_if / "queues")) == 8  # back to the VF's 4 queue pairs
        assert Ledger(StateDir(node.plugin.preparer.ledger.dir)).load().assignments == []


def test_shares_get_their_own_vf_created_on_demand_and_removed_when_idle() -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=4) as node:
        pf = pf_bdf(node, "ainic-0")
        assert node.numvfs(pf) == 0
        a = node.add("a", [("nic", "ainic-0", SHARE)])
        b = node.add("b", [("nic", "ainic-0", {**SHARE, "bandwidth": "100"})])
        res = node.prepare(a, b)
        assert not res[a.uid].error, res
        assert not res[b.uid].error, res
        assert node.numvfs(pf) == 4
        vfs = [node.prepared(r)[0].state["vf"] for r in (a, b)]
        assert vfs == [0, 1], "least-loaded: the lowest free VF"
        rates = vf_settings(node.root, pf)
        assert (rates[0]["max_tx_rate_mbps"], rates[1]["max_tx_rate_mbps"]) == (25_000, 100_000)
        nodes_a, nodes_b = node.device_nodes(a), node.device_nodes(b)
        assert nodes_a[0] != nodes_b[0], "each share gets its own uverbs device"
        env = next(v for k, v in node.env(a).items() if k.endswith("_QUEUES"))
        assert env == "0-3"
        assert not node.unprepare(a)[a.uid].error
        assert node.numvfs(pf) == 4, "b still holds a VF"
        assert not node.unprepare(b)[b.uid].error
        assert node.numvfs(pf) == 0, "on-demand VFs go when the pool is idle"
        assert node.kernel.refused == []


def test_a_vf_renamed_after_it_was_first_read_is_prepared_under_its_new_names() -> None:
    """udev renames a new VF's netdev and RDMA device: the next share uses the new names."""
    with ainic_node("h200-8gpu-8ainic-sriov", default_mode="shared") as node:
        a = node.add("a", [("nic", "ainic-1", SHARE)])
        assert not node.prepare(a)[a.uid].error
        env = node.env(a)
        old_if = next(v for k, v in env.items() if k.endswith("_IFNAME"))
        old_ib = next(v for k, v in env.items() if k.endswith("_RDMA_DEVICE"))
        vf = Path(os.path.realpath(node.root / "sys/class/net" / old_if / "device"))
        assert not node.unprepare(a)[a.uid].error
        cls = node.root / "sys/class"
        for kind, old, new in (("net", old_if, "renamed0"), ("infiniband", old_ib, "renamed_ib0")):
            (vf / kind / old).rename(vf / kind / new)
            (cls / kind / old).unlink()
            (cls / kind / new).symlink_to(os.path.relpath(vf / kind / new, cls / kind))
        (vf / "infiniband_verbs").iterdir().__next__().joinpath("ibdev").write_text("renamed_ib0\n")
        b = node.add("b", [("nic", "ainic-1", SHARE)])
        res = node.prepare(b)
        assert not res[b.uid].error, res
        env = node.env(b)
        assert next(v for k, v in env.items() if k.endswith("_IFNAME")) == "renamed0"
        assert next(v for k, v in env.items() if k.endswith("_RDMA_DEVICE")) == "renamed_ib0"
        queues = {q for q in os.listdir(vf / "net/renamed0/queues") if q.startswith("rx-")}
        assert len(queues) == int(SHARE["queues"]), "the share's queues set on the new name"
        assert not node.unprepare(b)[b.uid].error


def test_preexisting_vfs_are_never_removed() -> None:
    with ainic_node("h200-8gpu-8ainic-sriov", default_mode="shared") as node:
        pf = pf_bdf(node, "ainic-1")
        ref = node.add("a", [("nic", "ainic-1", SHARE)])
        assert not node.prepare(ref)[ref.uid].error
        assert not node.unprepare(ref)[ref.uid].error
        assert node.numvfs(pf) == 4


def test_a_share_asking_more_than_its_allocation_fails_naming_the_field() -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared") as node:
        ref = node.add("a", [("nic", "ainic-0", SHARE)], [nic_config(queues=8)])
        err = node.prepare(ref)[ref.uid].error
        assert "NicConfig queues: 8 is more than the 4 queues this share was allocated" in err
        assert "request capacity queues: 8" in err


def test_invalid_nic_config_fails_only_its_claim() -> None:
    with ainic_node("h200-8gpu-8ainic") as node:
        bad = node.add("bad", [("nic", "ainic-0", None)], [nic_config(vf={"vlan": 5000}, rmda={})])
        good = node.add("good", [("nic", "ainic-1", None)], [nic_config(rdma={"enabled": False})])
        res = node.prepare(bad, good)
        assert "vf.vlan" in res[bad.uid].error
        assert "4094" in res[bad.uid].error
        assert "rmda" in res[bad.uid].error
        assert not res[good.uid].error
        assert node.device_nodes(good) == [], "rdma.enabled false: no char devices"


def test_repeated_prepare_after_a_lost_cdi_spec_keeps_the_same_vf() -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=2) as node:
        ref = node.add("a", [("nic", "ainic-4", SHARE)])
        assert not node.prepare(ref)[ref.uid].error
        first = node.prepared(ref)[0].state
        for spec in node.cdi_dir.iterdir():
            spec.unlink()  # the pipeline now calls the backend again
        assert not node.prepare(ref)[ref.uid].error
        assert node.prepared(ref)[0].state == first
        ledger = node.plugin.preparer.ledger.load()
        assert len(ledger.assignments) == 1


def test_a_vf_left_by_a_lost_claim_is_reset_by_the_next_prepare() -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=2) as node:
        pf = pf_bdf(node, "ainic-5")
        # a prepare whose result never reached the checkpoint (the process was killed)
        lost = ClaimInfo(
            namespace="ns",
            name="lost",
            uid="lost-uid",
            devices=(
                AllocatedDevice.model_validate(
                    {
                        "request": "nic",
                        "driver": DRIVER,
                        "pool": NODE,
                        "device": "ainic-5",
                        "consumedCapacity": SHARE,
                        "shareID": "0123abcd",
                    }
                ),
            ),
        )
        node.plugin.drakit_prepare_devices(lost, [], frozenset())
        assert node.numvfs(pf) == 2
        assert vf_settings(node.root, pf)[0]["max_tx_rate_mbps"] == 25_000
        other = node.add("other", [("nic", "ainic-6", None)])
        assert not node.prepare(other)[other.uid].error
        assert vf_settings(node.root, pf)[0]["max_tx_rate_mbps"] == 0
        assert node.numvfs(pf) == 0
        left = node.plugin.preparer.ledger.load().assignments
        assert [a.claim for a in left] == [other.uid]


def test_32_shares_in_flight_never_share_a_vf() -> None:
    with ainic_node("mi300x-8gpu-8ainic-16vf", default_mode="shared") as node:
        refs = [
            node.add(f"c{i}", [("nic", f"ainic-{i % 2}", {"queues": "1", "bandwidth": "10"})])
            for i in range(32)
        ]
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda r: node.prepare(r)[r.uid], refs))
        assert [r.error for r in results] == [""] * 32
        held = [(p.state["pf"], p.state["vf"]) for r in refs for p in node.prepared(r)]
        assert len(set(held)) == 32
        devices = [node.device_nodes(r)[0] for r in refs]
        assert len(set(devices)) == 32


def test_least_loaded_prefers_fewest_shares_then_lowest_index() -> None:
    req = SelectionRequest(
        kind="ainic-vf",
        count=1,
        available=frozenset({1, 2, 3}),
        options={"loads": {1: 2, 2: 1, 3: 1}},
    )
    assert least_loaded(req).units == frozenset({2})


def test_whole_pf_claims_never_read_or_write_the_vf_ledger() -> None:
    with ainic_node("h200-8gpu-8ainic-sriov") as node:
        ledger = node.plugin.preparer.ledger
        ledger.path.parent.mkdir(parents=True, exist_ok=True)
        ledger.path.write_text("not json")  # any read of it would fail the claim
        ref = node.add("pf", [("nic", "ainic-0", None)])
        assert not node.prepare(ref)[ref.uid].error
        assert not node.unprepare(ref)[ref.uid].error
        assert ledger.path.read_text() == "not json"


def test_the_ledger_is_read_once_and_a_failed_write_is_not_kept_in_memory() -> None:
    with ainic_node("h200-8gpu-8ainic-sriov", default_mode="shared") as node:
        ledger = node.plugin.preparer.ledger
        a = node.add("a", [("nic", "ainic-0", SHARE)])
        assert not node.prepare(a)[a.uid].error
        on_disk = ledger.path.read_text()
        ledger.path.write_text('{"assignments": [], "on_demand": {}}')  # not read again
        b = node.add("b", [("nic", "ainic-0", SHARE)])
        assert not node.prepare(b)[b.uid].error
        held = {x.claim for x in Ledger(StateDir(ledger.dir)).load().assignments}
        assert held == {a.uid, b.uid}, on_disk
        # a write that fails (a directory where the temp file goes) fails the claim, leaves
        # the file as it was, and is not kept: the next prepare reads the file again
        tmp = ledger.dir / ".vf-ledger.json.tmp"
        tmp.mkdir()
        c = node.add("c", [("nic", "ainic-0", SHARE)])
        assert "vf-ledger.json.tmp is a directory" in node.prepare(c)[c.uid].error
        tmp.rmdir()
        assert {x.claim for x in Ledger(StateDir(ledger.dir)).load().assignments} == {a.uid, b.uid}
        assert {x.claim for x in ledger.load().assignments} == {a.uid, b.uid}
        res = node.unprepare(a, b, c)
        assert not any(r.error for r in res.values()), res
        assert Ledger(StateDir(ledger.dir)).load().assignments == []


def test_after_a_reboot_the_ledger_is_void_and_every_share_is_prepared_again(
    tmp_path: Path,
) -> None:
    """A reboot takes every VF and its settings: nothing the ledger held then is held now.

    The kubelet prepares every claim again after a reboot (the checkpoint demotes them). A
    ledger from the boot before still listed their VFs, so the first re-prepared share found
    its on-demand pool gone and "in use" by the others, and none of them could create it again.
    """
    root = build_profile("h200-8gpu-8ainic", tmp_path / "root")
    boot = root / "proc/sys/kernel/random/boot_id"
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text("boot-1\n")
    settings = DrakitSettings(
        sysfs_root=root,
        node_name=NODE,
        state_dir=tmp_path / "state",
        plugins={
            "amd_ainic": {
                "default_mode": "shared",
                "vf_limit": 2,
            }
        },
    )
    claims = ClaimStore(copy=False)

    def start(boot_id: str) -> DriverState:  # a fresh node process: nothing in memory
        node = NodeInfo(name=NODE, sysfs_root=str(root))
        host = PluginHost(settings, node, libraries=simulated_libraries(root))
        build_inventory(host)
        return DriverState(
            DRIVER,
            host,
            claims,
            state_dir=tmp_path / "state",
            cdi_dir=tmp_path / "cdi",
            boot_id=boot_id,
        )

    def share(name: str) -> ClaimRef:
        uid = str(uuid.uuid4())
        result = {
            "request": "nic",
            "driver": DRIVER,
            "pool": NODE,
            "device": "ainic-0",
            "consumedCapacity": SHARE,
            "shareID": uuid.uuid4().hex[:8],
        }
        claims.add(
            {
                "metadata": {"namespace": "ns", "name": name, "uid": uid},
                "status": {"allocation": {"devices": {"results": [result], "config": []}}},
            }
        )
        return ClaimRef(namespace="ns", name=name, uid=uid)

    with SriovKernel(get_profile("h200-8gpu-8ainic"), root) as kernel:
        state = start("boot-1")
        refs = [share("a"), share("b")]
        assert [r.error for r in state.prepare(refs).values()] == ["", ""]
        pf = state.prepared_claims()[refs[0].uid].prepared["amd_ainic"][0].state["pf"]
        pf_dir = (root / "sys/bus/pci/devices" / pf).resolve()
        assert len(list(pf_dir.glob("virtfn*"))) == 2
        state.close()
        # the reboot: the kernel starts without VFs, the CDI specs (tmpfs) are gone
        (pf_dir / "sriov_numvfs").write_text("0\n")
        deadline = time.monotonic() + 10
        while list(pf_dir.glob("virtfn*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not list(pf_dir.glob("virtfn*"))
        (root / "drakit-sim/netlink" / f"{pf}.json").unlink()
        for spec in (tmp_path / "cdi").iterdir():
            spec.unlink()
        boot.write_text("boot-2\n")
        state = start("boot-2")
        got = state.prepare(refs)
        assert [r.error for r in got.values()] == ["", ""], got
        assert len(list(pf_dir.glob("virtfn*"))) == 2, "the pool is created on demand again"
        vfs = {state.prepared_claims()[r.uid].prepared["amd_ainic"][0].state["vf"] for r in refs}
        assert vfs == {0, 1}
        assert [r.error for r in state.unprepare(refs).values()] == ["", ""]
        assert not list(pf_dir.glob("virtfn*")), "and removed once idle"
        assert (
            Ledger(StateDir(tmp_path / "state" / "plugin_state" / "amd_ainic")).load().on_demand
            == {}
        )
        assert kernel.refused == []
        state.close()


def test_interface_is_recorded_for_the_sandbox_start_and_refused_where_it_cannot_move() -> None:
    iface = {"name": "net1", "mtu": 4000, "addresses": ["10.0.0.5/24"]}
    with ainic_node("h200-8gpu-8ainic") as node:
        ref = node.add("c1", [("nic", "ainic-3", None)], [nic_config(interface=iface)])
        plain = node.add("c2", [("nic", "ainic-4", None)])
        res = node.prepare(ref, plain)
        assert not res[ref.uid].error, res[ref.uid].error
        (dev,) = node.prepared(ref)
        assert dev.state["move"] == iface
        assert dev.state["ifname"] == "enp94s0"
        (other,) = node.prepared(plain)
        assert "move" not in other.state, "no interface, move_netdevs: configured"
    with ainic_node("h200-8gpu-8ainic", move_netdevs="never") as node:
        ref = node.add("c1", [("nic", "ainic-3", None)], [nic_config(interface={})])
        err = node.prepare(ref)[ref.uid].error
        assert "NicConfig interface: moving netdevs into pods is off on this node" in err
        assert "move_netdevs: never" in err
    with ainic_node("h200-8gpu-8ainic", move_netdevs="always") as node:
        ref = node.add("c1", [("nic", "ainic-3", None)])
        assert not node.prepare(ref)[ref.uid].error
        (dev,) = node.prepared(ref)
        assert dev.state["move"] == {}, "always: moved under its host name"
    with ainic_node("h200-8gpu-8ainic", rdma_netns_mode="exclusive") as node:
        ref = node.add("c1", [("nic", "ainic-3", None)], [nic_config(interface={})])
        ok = node.add(
            "c2", [("nic", "ainic-4", None)], [nic_config(interface={}, rdma={"enabled": False})]
        )
        res = node.prepare(ref, ok)
        assert "RDMA netns mode is exclusive, where RDMA device ionic_3" in res[ref.uid].error
        assert not res[ok.uid].error
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", shares_per_vf=2) as node:
        ref = node.add("a", [("nic", "ainic-0", SHARE)], [nic_config(interface={"name": "n"})])
        err = node.prepare(ref)[ref.uid].error
        assert "NicConfig interface: this VF is shared by up to 2 claims" in err
    with ainic_node("h200-8gpu-8ainic", default_mode="shared") as node:
        ref = node.add("a", [("nic", "ainic-0", SHARE)], [nic_config(interface={"mtu": 9216})])
        err = node.prepare(ref)[ref.uid].error
        assert "NicConfig interface.mtu: 9216 is above the PF's MTU" in err
