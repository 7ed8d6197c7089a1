"""Scenarios of :mod:`drakit_amd_ainic.podnet` against a real kernel, run by ``test_podnet.py``.

Each scenario runs as ``unshare --net python podnet_child.py <scenario> <state-dir>``: the
process's own network namespace is a private one that stands for the host's, so the host's
links are never touched, and everything created here (veth pairs, pod namespaces) dies with
the process. A pod's namespace is a ``sleep`` in a namespace of its own (``unshare --net``), its
path ``/proc/<pid>/ns/net``, as the runtime's ``/var/run/netns/cni-...`` would be. Prints one
JSON object: what the scenario saw.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute  # type: ignore[import-untyped]

from drakit.errors import PermanentError, RetryableError
from drakit.models import PodRef, PodSandboxView, PreparedDevice
from drakit.statefiles import StateDir
from drakit_amd_ainic.netns import Mover, PodNetns
from drakit_amd_ainic.podnet import CRASH_POINTS, PodNetwork

HOST_IF = "drkh0"
PEER_IF = "drkp0"
FN = "0000:18:00.0"
MOVE = {"name": "net1", "mtu": 9000, "addresses": ["10.1.2.3/24", "fd00::3/64"]}
HOST_MTU = 1400
HOST_ADDR = "192.0.2.1/24"


def device(move: dict[str, Any] | None = None) -> PreparedDevice:
    return PreparedDevice(
        request="nic",
        pool="n",
        device="ainic-0",
        state={"function": FN, "ifname": HOST_IF, "move": move or MOVE, "claim": "c1"},
    )


def sandbox(path: str | None, sid: str = "sb1") -> PodSandboxView:
    return PodSandboxView(
        id=sid, pod=PodRef(uid=f"uid-{sid}", namespace="ns", name=f"pod-{sid}"), netns=path
    )


@contextmanager
def pod_netns() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A pod's network namespace: its holder process and its path."""
    mine = os.stat("/proc/self/ns/net").st_ino
    proc = subprocess.Popen(["unshare", "--net", "--", "sleep", "600"])
    path = f"/proc/{proc.pid}/ns/net"
    deadline = time.monotonic() + 10
    while os.stat(path).st_ino == mine:  # until unshare has made the namespace
        if time.monotonic() > deadline:
            raise RuntimeError("unshare did not make a network namespace")
        time.sleep(0.01)
    try:
        yield proc, path
    finally:
        proc.kill()
        proc.wait()


def make_host_veth() -> None:
    with IPRoute() as ip:
        ip.link("add", ifname=HOST_IF, kind="veth", peer=PEER_IF)
        (idx,) = ip.link_lookup(ifname=HOST_IF)
        ip.link("set", index=idx, mtu=HOST_MTU)
        ip.addr("add", index=idx, address="192.0.2.1", prefixlen=24)
        ip.link("set", index=idx, state="up")


def links(path: str | None) -> dict[str, dict[str, Any]]:
    """Name -> {mtu, up, addresses, mac} of every link in ``path``'s namespace (None: ours)."""

    def read(ipr: Any) -> dict[str, dict[str, Any]]:
        out = {}
        for m in ipr.get_links():
            idx = m["index"]
            out[m.get("IFLA_IFNAME")] = {
                "mtu": m.get("IFLA_MTU"),
                "up": bool(m["flags"] & 1),
                "mac": m.get("IFLA_ADDRESS"),
                "addresses": sorted(
                    f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}"
                    for a in ipr.get_addr(index=idx)
                    if a["scope"] == 0
                ),
            }
        return out

    if path is None:
        return Mover().run_in(None, "read", read)
    with PodNetns(path) as ns:
        return Mover().run_in(ns, "read", read)


def error(call: Callable[[], object]) -> list[str] | None:
    try:
        call()
    except (PermanentError, RetryableError) as e:
        return [type(e).__name__, str(e)]
    return None


def journal(state: Path) -> dict[str, Any]:
    path = state / "netdev-moves.json"
    if not path.exists():
        return {}
    moves: dict[str, Any] = json.loads(path.read_text())["data"]["moves"]
    return {fn: m["phase"] for fn, m in moves.items()}


# -- scenarios -----------------------------------------------------------------------------------


def move_and_back(state: Path) -> dict[str, Any]:
    make_host_veth()
    out: dict[str, Any] = {"host_before": links(None)[HOST_IF]}
    net = PodNetwork(StateDir(state))
    with pod_netns() as (_, path):
        got = net.start(sandbox(path), "c1", [device()])
        assert got is not None
        out["network_data"] = got[0].network_data.to_api() if got[0].network_data else None
        out["pod"] = links(path)
        out["host_names"] = sorted(links(None))
        out["journal_in"] = journal(state)
        again = net.start(sandbox(path), "c1", [device()])  # idempotent
        out["again"] = again[0].network_data.to_api() if again and again[0].network_data else None
        out["pod_again"] = sorted(links(path))
        net.stop(sandbox(path, "sbX"), "c1")  # another sandbox of the claim: not this one
        out["pod_after_other_stop"] = sorted(links(path))
        # as core's Synchronize sends it for a pod whose sandbox is gone: no id, no netns
        gone = PodSandboxView(id="", pod=PodRef(uid="uid-sb1", namespace="", name=""))
        net.stop(gone, "c1")
        out["pod_after"] = sorted(links(path))
        out["host_after"] = links(None).get(HOST_IF)
        out["journal_after"] = journal(state)
    return out


def refusals(state: Path) -> dict[str, Any]:
    make_host_veth()
    out: dict[str, Any] = {}
    net = PodNetwork(StateDir(state))
    out["host_network"] = error(lambda: net.start(sandbox(None), "c1", [device()]))
    out["no_move"] = net.start(
        sandbox("/nonexistent"),
        "c1",
        [PreparedDevice(request="r", pool="n", device="d", state={"function": FN})],
    )
    out["gone_netns"] = error(lambda: net.start(sandbox("/nonexistent/ns"), "c1", [device()]))
    plain = state / "plain-file"
    plain.write_text("")
    out["not_a_netns"] = error(lambda: net.start(sandbox(str(plain)), "c1", [device()]))
    with pod_netns() as (_, path):
        with PodNetns(path) as ns:
            Mover().run_in(
                ns, "veth", lambda ip: ip.link("add", ifname="net1", kind="veth", peer="x1")
            )
        out["name_taken"] = error(lambda: net.start(sandbox(path), "c1", [device()]))
        out["pod_after_name_taken"] = sorted(links(path))
        out["host_after_name_taken"] = links(None).get(HOST_IF)
        out["journal_after_name_taken"] = journal(state)
        with pod_netns() as (_, other):
            out["first"] = error(
                lambda: net.start(sandbox(other, "sbA"), "c1", [device({"name": "net2"})])
            )
            out["second_pod"] = error(
                lambda: net.start(sandbox(path, "sbB"), "c1", [device({"name": "net2"})])
            )
            net.stop(sandbox(other, "sbA"), "c1")
        out["host_after"] = links(None).get(HOST_IF)
    return out


def netns_dies(state: Path) -> dict[str, Any]:
    """A veth dies with its namespace; a physical netdev comes back (played: see below)."""
    out: dict[str, Any] = {}
    make_host_veth()
    net = PodNetwork(StateDir(state))
    with pod_netns() as (proc, path):
        net.start(sandbox(path), "c1", [device()])
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while HOST_IF in links(None) or PEER_IF in links(None):  # the kernel cleans up async
        assert time.monotonic() < deadline
        time.sleep(0.05)
    net.recover()
    out["veth_journal"] = journal(state)
    # A physical netdev comes back to the host when its namespace dies, under its pod name
    # (the kernel's default_device_exit_net). veth cannot do that, so this plays the kernel:
    # the netdev is moved to the host keeping its pod name, then the namespace dies.
    make_host_veth()
    net = PodNetwork(StateDir(state))  # a restarted node: the journal from the file
    with pod_netns() as (proc, path):
        net.start(sandbox(path), "c1", [device()])
        with PodNetns(path) as ns, PodNetns("/proc/self/ns/net") as host:
            link = Mover().find(ns, ["net1"], None)
            assert link is not None
            Mover().move(ns, link.index, host, "net1", "the kernel's refund")
        proc.kill()
        proc.wait()
    out["refunded_names"] = sorted(n for n in links(None) if n.startswith(("drk", "net")))
    PodNetwork(StateDir(state)).recover()
    out["host_after"] = links(None).get(HOST_IF)
    out["names_after"] = sorted(n for n in links(None) if n.startswith(("drk", "net")))
    out["journal_after"] = journal(state)
    return out


def crash(state: Path) -> dict[str, Any]:
    """kill -9 at each point of a move in and out; a restart finishes or undoes it."""
    make_host_veth()
    out: dict[str, Any] = {}
    with pod_netns() as (_, path):
        for point in CRASH_POINTS:
            st = state / point
            st.mkdir()
            env = {**os.environ, "DRAKIT_CRASH_AT": point}
            child = subprocess.run(
                [sys.executable, __file__, "crash-child", str(st), path],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            seen: dict[str, Any] = {
                "rc": child.returncode,
                "stderr": child.stderr[-400:],
                "journal": journal(st),
            }
            net = PodNetwork(StateDir(st))  # the restarted node
            net.recover()
            seen["recovered"] = journal(st)
            seen["pod"] = links(path).get("net1")
            net.stop(sandbox(path), "c1")
            seen["final_journal"] = journal(st)
            seen["final_pod"] = sorted(links(path))
            seen["host"] = links(None).get(HOST_IF)
            out[point] = seen
    return out


def crash_child(state: Path, path: str) -> dict[str, Any]:
    net = PodNetwork(StateDir(state))
    net.start(sandbox(path), "c1", [device()])
    net.stop(sandbox(path), "c1")
    return {"survived": True}


def through_the_host(state: Path) -> dict[str, Any]:
    """Prepare through the node's pipeline, then the hooks through the plugin host."""
    import dataclasses  # noqa: PLC0415 - this scenario only

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import NODE, AinicNode, nic_config  # type: ignore[import-not-found]  # noqa: PLC0415
    from drakit.sim import MachineSpec, PciRootSpec, get_profile  # noqa: PLC0415
    from drakit.testing import build_sim_node, run_node  # noqa: PLC0415
    from drakit_amd_ainic.sim import pollara  # noqa: PLC0415

    make_host_veth()
    pf = pollara("0000:18:00.0", 0x18, 0, sriov_vfs=0, total_vfs=0)
    netdev = dataclasses.replace(pf.netdevs[0], name=HOST_IF)
    rdma = tuple(dataclasses.replace(r, netdev=HOST_IF) for r in pf.rdma)
    pf = dataclasses.replace(pf, netdevs=(netdev,), rdma=rdma, sriov=None)
    spec = MachineSpec(
        name="one-ainic",
        description="one Pollara PF whose netdev is a real veth end",
        cpu=get_profile("minimal-1s").cpu,
        pci_roots=(PciRootSpec(bus=0x18, numa_node=0, children=(pf,)),),
    )
    sim = build_sim_node(spec, state / "root", node_name=NODE)
    out: dict[str, Any] = {}
    config: dict[str, Any] = {"plugins": {"amd_ainic": {}}}
    with run_node(config, sim, state_dir=state / "node") as running:
        node = AinicNode(sim.root, running, None)
        ref = node.add("c1", [("nic", "ainic-0", None)], [nic_config(interface=MOVE)])
        out["prepare_error"] = node.prepare(ref)[ref.uid].error
        (dev,) = node.prepared(ref)
        out["prepared_network_data"] = dev.network_data.to_api() if dev.network_data else None
        with pod_netns() as (_, path):
            got = node.host.pod_sandbox_start("amd_ainic", sandbox(path), ref.uid, [dev])
            out["started"] = [d.network_data.to_api() for d in got or [] if d.network_data]
            out["pod"] = sorted(links(path))
            # the host's sysfs no longer shows a moved netdev: the tree plays that, and a
            # discovery round still publishes the PF as it was read before the move
            fn_dir = (sim.root / "sys/bus/pci/devices/0000:18:00.0").resolve()
            shutil.move(fn_dir / "net" / HOST_IF, state / "moved-netdev")
            (sim.root / "sys/class/net" / HOST_IF).unlink()
            plugin = node.plugin
            inventory = plugin.drakit_discover_devices(plugin.ctx.node)
            assert inventory is not None
            (published,) = inventory.devices
            out["published_while_moved"] = {
                k: published.attributes[k].model_dump(exclude_none=True, by_alias=True)
                for k in ("ifName", "pfName", "mtu")
                if k in published.attributes
            }
            out["capacity_while_moved"] = sorted(published.capacity)
            shutil.move(state / "moved-netdev", fn_dir / "net" / HOST_IF)
            (sim.root / "sys/class/net" / HOST_IF).symlink_to(fn_dir / "net" / HOST_IF)
            node.host.pod_sandbox_stop("amd_ainic", sandbox(path), ref.uid, [dev])
            out["pod_after_stop"] = sorted(links(path))
            out["host_after_stop"] = links(None).get(HOST_IF)
            node.host.pod_sandbox_start("amd_ainic", sandbox(path), ref.uid, [dev])
            out["unprepare_error"] = node.unprepare(ref)[ref.uid].error
            out["pod_after_unprepare"] = sorted(links(path))
            out["host_after_unprepare"] = links(None).get(HOST_IF)
    return out


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "through-the-host": through_the_host,
    "move-and-back": move_and_back,
    "refusals": refusals,
    "netns-dies": netns_dies,
    "crash": crash,
    "crash-child": crash_child,
}


def main() -> None:
    name, state, *rest = sys.argv[1:]
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(json.dumps(SCENARIOS[name](Path(state), *rest)))


if __name__ == "__main__":
    main()
