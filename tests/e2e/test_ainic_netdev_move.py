"""A NIC claim's netdev moves into its pod on the real node, and back when the pod goes.

The seam is the lowest one: the simulated sysfs tree has one Pollara PF whose netdev is named
after a veth end this module creates in the host's network namespace, so the backend reads
"its" NIC from the fake tree and moves a netdev the kernel really has. ``drakit node`` runs with
NRI on, inside the real node's mount namespace (where containerd's pod namespace mounts live,
as a DaemonSet sees ``/var/run/netns`` with HostToContainer propagation). The real scheduler
allocates the claim, the real kubelet prepares it, containerd calls drakit's NRI plugin at
RunPodSandbox, and the busybox container lists its own ``/sys/class/net``.

A kill -9 of ``drakit node`` in the middle of the move (``DRAKIT_CRASH_AT``, after the netdev
entered the pod and before it was configured) lets containerd start the sandbox without the
plugin (NRI v0.12.3 drops a plugin whose connection closes); the restarted node finishes the
move from its journal, and deleting the pod brings the netdev back, as it was.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import IPRoute  # type: ignore[import-untyped]
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import RESOURCE, NodeDirs, NodeProcess, create_device_class
from tests.e2e.realnode import RealNode, delete_pod, pod_claim, pod_events, run_pod

from drakit.sim import MachineSpec, PciRootSpec, SysfsBuilder, get_profile
from drakit_amd_ainic.sim import pollara

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

DRIVER = "ainic.amd.drakit.io"
HOST_MTU = 1400
POD_MTU = 1280
ADDRESS = "10.231.7.5/24"
NIC_CONFIG = {
    "apiVersion": "ainic.drakit.io/v1alpha1",
    "kind": "NicConfig",
    "interface": {"name": "net1", "mtu": POD_MTU, "addresses": [ADDRESS]},
}
# waits (90 s at most) for the netdev to be there and up, which it is last (after a crash it
# arrives unconfigured, and is configured when the restarted node recovers), then shows it
SHOW = (
    'i=0; while [ "$(cat /sys/class/net/net1/operstate 2>/dev/null)" != up ] && [ $i -lt 900 ]; '
    "do sleep 0.1; i=$((i+1)); done; "
    "ls /sys/class/net; echo mtu=$(cat /sys/class/net/net1/mtu); "
    "echo state=$(cat /sys/class/net/net1/operstate); ip -o -4 addr show dev net1"
)


@dataclasses.dataclass(frozen=True)
class _Dirs(NodeDirs):
    """The real node's kubelet directory; a state directory of this module's own."""

    @property
    def state_dir(self) -> Path:
        return self.root / "nic-state"


def _link(name: str) -> dict[str, Any] | None:
    with IPRoute() as ip:
        found = ip.link_lookup(ifname=name)
        if not found:
            return None
        (msg,) = ip.link("get", index=found[0])
        addrs = sorted(
            f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}"
            for a in ip.get_addr(index=found[0])
            if a["scope"] == 0
        )
    return {
        "mtu": msg.get("IFLA_MTU"),
        "up": bool(msg["flags"] & 1),
        "mac": msg.get("IFLA_ADDRESS"),
        "addresses": addrs,
    }


@pytest.fixture(scope="module")
def nic(control_plane: ControlPlane, real_node: RealNode) -> Iterator[dict[str, Any]]:
    """A veth pair in the host, a tree whose AINIC names one end, drakit with NRI, a class."""
    token = secrets.token_hex(3)
    host_if, peer_if = f"drk{token}n", f"drk{token}p"
    with IPRoute() as ip:
        ip.link("add", ifname=host_if, kind="veth", peer=peer_if)
        (idx,) = ip.link_lookup(ifname=host_if)
        ip.link("set", index=idx, mtu=HOST_MTU)
        ip.addr("add", index=idx, address="192.0.2.77", prefixlen=24)
        ip.link("set", index=idx, state="up")
        (peer,) = ip.link_lookup(ifname=peer_if)
        ip.link("set", index=peer, state="up")  # a carrier for the moved end: operstate up
    try:
        pf = pollara("0000:18:00.0", 0x18, 0, sriov_vfs=0, total_vfs=0)
        netdev = dataclasses.replace(pf.netdevs[0], name=host_if)
        rdma = tuple(dataclasses.replace(r, netdev=host_if) for r in pf.rdma)
        pf = dataclasses.replace(pf, netdevs=(netdev,), rdma=rdma, sriov=None)
        spec = MachineSpec(
            name="one-ainic",
            description="one Pollara PF whose netdev is a real veth end",
            cpu=get_profile("minimal-1s").cpu,
            pci_roots=(PciRootSpec(bus=0x18, numa_node=0, children=(pf,)),),
        )
        root = SysfsBuilder(spec).build(real_node.root / "nic-sim")
        dirs = _Dirs(real_node.root)
        dirs.state_dir.mkdir(exist_ok=True)
        device_class = f"nic-move-{token}"
        create_device_class(control_plane, device_class, DRIVER)

        def node(env: dict[str, str] | None = None, *, fail_closed: bool = True) -> NodeProcess:
            return NodeProcess(
                kubeconfig=control_plane.kubeconfig,
                node_name=real_node.name,
                dirs=dirs,
                plugins={"amd_ainic": {}},
                sysfs_root=root,
                instance_id="nic",
                env=env,
                settings={
                    "nri": {
                        "enabled": True,
                        "socket": str(real_node.nri_socket),
                        "plugin_name": "drakit-nic",
                        "plugin_index": "51",
                        "fail_closed": fail_closed,
                    },
                    "health": {"interval": 2},  # recovery runs at the health polls
                },
                wrap=real_node.nsenter_argv(),
            )

        state: dict[str, Any] = {
            "host_if": host_if,
            "class": device_class,
            "dirs": dirs,
            "node": node,
            "before": _link(host_if),
        }
        try:
            yield state
        finally:
            if "proc" in state:
                state["proc"].close()
            control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{device_class}")
    finally:
        with IPRoute() as ip:
            for name in (host_if, peer_if):
                for index in ip.link_lookup(ifname=name):
                    ip.link("del", index=index)


def _claim(cp: ControlPlane, ns: str, name: str, device_class: str) -> None:
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "nic", "exactly": {"deviceClassName": device_class}}],
                        "config": [
                            {
                                "requests": ["nic"],
                                "opaque": {"driver": DRIVER, "parameters": NIC_CONFIG},
                            }
                        ],
                    }
                }
            },
        },
    )


def _journal(dirs: NodeDirs) -> dict[str, Any]:
    path = dirs.state_dir / "plugin_state" / "amd_ainic" / "netdev-moves.json"
    if not path.exists():
        return {}
    moves: dict[str, Any] = json.loads(path.read_text())["data"]["moves"]
    return moves


def _check_pod_has_it(log: str) -> None:
    assert "net1" in log.split(), log
    assert f"mtu={POD_MTU}" in log, log
    assert "state=up" in log, log
    assert ADDRESS in log, log


def _wait_back(nic: dict[str, Any]) -> None:
    wait_for(
        lambda: _link(nic["host_if"]) == nic["before"] and not _journal(nic["dirs"]),
        timeout=60,
        what=f"{nic['host_if']} back in the host as it was, the journal empty",
    )


def test_the_claimed_netdev_is_in_the_pod_under_its_name_and_comes_back(
    control_plane: ControlPlane, real_node: RealNode, nic: dict[str, Any], namespace: str
) -> None:
    cp = control_plane
    nic["proc"] = nic["node"]().start()
    nic["proc"].wait_ready(timeout=90)
    _claim(cp, namespace, "nic", nic["class"])
    log = run_pod(
        cp, real_node, namespace, "moved", SHOW, {"nic": {"resourceClaimTemplateName": "nic"}}
    )
    _check_pod_has_it(log)
    assert _link(nic["host_if"]) is None, "the netdev left the host's namespace"
    (entry,) = _journal(nic["dirs"]).values()
    assert entry["phase"] == "in"
    # what the hook returned, as core recorded it to write into the claim's networkData
    uid = pod_claim(cp, namespace, "moved")["metadata"]["uid"]
    (recorded,) = nic["dirs"].checkpoint(DRIVER)[uid]["prepared"]["amd_ainic"]
    assert recorded["network_data"]["interface_name"] == "net1"
    assert recorded["network_data"]["ips"] == [ADDRESS]

    def in_pod_name() -> object:
        devices = (pod_claim(cp, namespace, "moved").get("status") or {}).get("devices") or []
        return [d.get("networkData", {}).get("interfaceName") for d in devices]

    wait_for(lambda: in_pod_name() == ["net1"], timeout=30, what="the claim's networkData: net1")
    delete_pod(cp, namespace, "moved")
    _wait_back(nic)


def test_kill_9_mid_move_then_restart_loses_nothing_and_leaves_nothing(
    control_plane: ControlPlane, real_node: RealNode, nic: dict[str, Any], namespace: str
) -> None:
    cp = control_plane
    if "proc" in nic:
        nic.pop("proc").close()
    # fail closed off: the container starts while drakit is down (with it on, it would wait
    # for drakit, and a restartPolicy Never pod would fail instead)
    crashed = nic["node"]({"DRAKIT_CRASH_AT": "netdev-after-move-in"}, fail_closed=False).start()
    nic["proc"] = crashed
    crashed.wait_ready(timeout=90)
    _claim(cp, namespace, "nic", nic["class"])
    result: dict[str, Any] = {}

    def start_pod() -> None:  # blocks until the pod printed: after the restart below
        try:
            result["log"] = run_pod(
                cp,
                real_node,
                namespace,
                "crash",
                SHOW,
                {"nic": {"resourceClaimTemplateName": "nic"}},
                timeout=150,
            )
        except BaseException as e:  # noqa: BLE001 - reported below
            result["error"] = e

    runner = threading.Thread(target=start_pod, daemon=True)
    runner.start()
    # the pod's sandbox start reaches drakit, which dies inside the move
    wait_for(
        lambda: crashed.returncode is not None,
        timeout=90,
        what=f"drakit killed mid-move ({crashed.log_tail()})",
    )
    assert crashed.returncode == -signal.SIGKILL
    (entry,) = _journal(nic["dirs"]).values()
    assert entry["phase"] == "moving-in", entry  # the kill came after the move, before "in"
    crashed.close()
    nic["proc"] = nic["node"](fail_closed=False).start()
    runner.join(timeout=200)
    if "error" in result:
        raise AssertionError(f"{result['error']}; events: {pod_events(cp, namespace, 'crash')}")
    _check_pod_has_it(result["log"])
    assert _journal(nic["dirs"])[entry["function"]]["phase"] == "in"
    delete_pod(cp, namespace, "crash")
    _wait_back(nic)
