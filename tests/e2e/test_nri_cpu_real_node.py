"""CPU claims enforced through NRI on the real node (containerd 2.4.2, runc, the real kubelet).

One ``drakit node`` with the CPU backend on the machine's own CPUs (``sysfs_root: /``, one
device per CPU, a driver of its own) and ``nri.enabled``: a pod with a CPU claim runs on exactly
the claim's CPUs, read inside the container from ``/proc/self/status``; a pod without one is
kept off them, and follows as claims come and go; a container created while drakit was down is
corrected at the next Synchronize; with ``fail_closed`` a container with a drakit claim does not
start while drakit's NRI plugin is away and starts once it is back, and without it it starts.

drakit's NRI plugin reaches containerd's socket through a link the tests remove and put back, so
drakit keeps serving the kubelet (prepare works) while its NRI plugin is away.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import RESOURCE, NodeDirs, NodeProcess, create_device_class
from tests.e2e.realnode import (
    RealNode,
    claim_template,
    delete_pod,
    pod,
    pod_claim,
    pod_events,
)

from drakit.cpuset import parse_cpulist

pytestmark = [pytest.mark.e2e, pytest.mark.real_node]

DRIVER = "cpu-nri.drakit.io"
PRINT = "while true; do grep Cpus_allowed_list /proc/self/status; sleep 0.5; done"


class Drakit:
    """``drakit node`` for this module: started, stopped and restarted by the tests."""

    def __init__(self, cp: ControlPlane, node: RealNode) -> None:
        self.cp, self.node = cp, node
        self.dirs = NodeDirs(node.root)
        self.dirs.state_dir.mkdir(exist_ok=True)
        self.link = node.root / "nri-drakit.sock"  # drakit's way to containerd's NRI socket
        self.proc: NodeProcess | None = None
        self.runs = 0
        self.cls = f"cpu-nri-{uuid.uuid4().hex[:6]}"  # its DeviceClass

    def nri_up(self, up: bool) -> None:
        """Put the link to the NRI socket in place, or take it away."""
        self.link.unlink(missing_ok=True)
        if up:
            self.link.symlink_to(self.node.nri_socket)

    def start(self, *, fail_closed: bool = True, ready: bool = True) -> NodeProcess:
        self.runs += 1
        proc = NodeProcess(
            kubeconfig=self.cp.kubeconfig,
            node_name=self.node.name,
            dirs=self.dirs,
            plugins={"cpu": {"driver": DRIVER, "mode": "individual"}},
            sysfs_root=Path("/"),
            instance_id=f"nri{self.runs}",
            settings={
                "nri": {
                    "enabled": True,
                    "socket": str(self.link),
                    "plugin_index": "60",
                    "fail_closed": fail_closed,
                }
            },
        )
        self.proc = proc
        proc.start(wait=False)
        proc.wait_serving(timeout=90)
        if ready:
            proc.wait_ready(timeout=90)
        return proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None


@pytest.fixture(scope="module")
def drakit(control_plane: ControlPlane, real_node: RealNode) -> Iterator[Drakit]:
    d = Drakit(control_plane, real_node)
    d.nri_up(True)
    create_device_class(control_plane, d.cls, DRIVER)
    try:
        d.start()
        yield d
    finally:
        d.stop()
        d.link.unlink(missing_ok=True)
        control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{d.cls}")


def _online() -> frozenset[int]:
    return parse_cpulist(Path("/sys/devices/system/cpu/online").read_text().strip())


def _allowed(node: RealNode, ns: str, name: str) -> frozenset[int] | None:
    """What the pod's container printed last: its ``Cpus_allowed_list``."""
    lines = re.findall(r"Cpus_allowed_list:\s*(\S+)", node.pod_log(ns, name, "c"))
    return parse_cpulist(lines[-1]) if lines else None


def _runs_on(node: RealNode, ns: str, name: str, cpus: frozenset[int], what: str) -> None:
    wait_for(lambda: _allowed(node, ns, name) == cpus, timeout=90, what=what)


def _start(cp: ControlPlane, node: RealNode, ns: str, name: str, claim: bool) -> None:
    claims = {"cpu": {"resourceClaimTemplateName": "cpu"}} if claim else {}
    body = pod(name, node.name, ["sh", "-c", PRINT], claims=claims, restart="Always")
    cp.api("POST", f"/api/v1/namespaces/{ns}/pods", body)


def _claim_cpus(cp: ControlPlane, d: Drakit, ns: str, name: str) -> frozenset[int]:
    uid = pod_claim(cp, ns, name)["metadata"]["uid"]
    record: dict[str, Any] = d.dirs.checkpoint(DRIVER)[uid]
    pod_uid = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")["metadata"]["uid"]
    assert pod_uid in record["reserved_for"], "the pod -> claims map NRI's pod events use"
    (device,) = record["prepared"]["cpu"]
    return parse_cpulist(device["state"]["cpus"])


def test_a_cpu_claim_pins_its_container_and_the_others_keep_off_it(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    online = _online()
    assert len(online) >= 2, "the test needs two CPUs: one claimed, one shared"
    claim_template(cp, namespace, "cpu", drakit.cls)
    _start(cp, node, namespace, "free", claim=False)
    _runs_on(node, namespace, "free", online, "the pod without a claim to run on every CPU")

    _start(cp, node, namespace, "pinned", claim=True)
    wait_for(lambda: _allowed(node, namespace, "pinned"), timeout=90, what="pinned to print")
    cpus = _claim_cpus(cp, drakit, namespace, "pinned")
    assert len(cpus) == 1
    assert _allowed(node, namespace, "pinned") == cpus, "the claim's CPUs, exactly"
    # the claim came: the running pod without one leaves its CPUs (an unsolicited update)
    _runs_on(node, namespace, "free", online - cpus, "the shared pool to shrink")

    delete_pod(cp, namespace, "pinned")  # the claim goes: the shared pool grows back
    _runs_on(node, namespace, "free", online, "the shared pool to grow back")
    assert drakit.proc is not None
    log = drakit.proc.log()
    # containerd 2.4.2 passes the kubelet's CDI devices in NRI's Container.CDI_devices
    assert re.search(rf"/pinned/c: CDI_devices \[k8s\.{re.escape(DRIVER)}/claim=", log), log
    delete_pod(cp, namespace, "free")


def test_a_container_created_while_drakit_was_down_is_corrected(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    online = _online()
    claim_template(cp, namespace, "cpu", drakit.cls)
    _start(cp, node, namespace, "pinned", claim=True)
    wait_for(lambda: _allowed(node, namespace, "pinned"), timeout=90, what="pinned to print")
    cpus = _claim_cpus(cp, drakit, namespace, "pinned")

    drakit.stop()
    _start(cp, node, namespace, "late", claim=False)
    _runs_on(node, namespace, "late", online, "the late pod to run on every CPU")
    drakit.start()  # Synchronize lists the late container: it is moved off the claim's CPUs
    _runs_on(node, namespace, "late", online - cpus, "the late container to be corrected")
    assert _allowed(node, namespace, "pinned") == cpus
    delete_pod(cp, namespace, "late")
    delete_pod(cp, namespace, "pinned")


def test_fail_closed_holds_a_claimed_container_until_the_plugin_is_back(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    claim_template(cp, namespace, "cpu", drakit.cls)
    drakit.stop()
    drakit.nri_up(False)
    proc = drakit.start(ready=False)

    def unready() -> str | None:
        status, reason = proc.http("/readyz")
        return reason if status == 503 and "NRI plugin absent" in reason else None

    wait_for(unready, timeout=60, what="/readyz to report the absent NRI plugin")
    try:
        _start(cp, node, namespace, "held", claim=True)

        def refused() -> list[str] | None:
            found = [e for e in pod_events(cp, namespace, "held") if "drakit-nri-plugin" in e]
            return found or None

        events = wait_for(refused, timeout=120, what="the runtime to refuse the container")
        assert "did-not-process-this-container" in events[0]
        assert _allowed(node, namespace, "held") is None, "the container ran unprocessed"
        status = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/held")["status"]
        (container,) = status["containerStatuses"]
        assert "running" not in container["state"], container
    finally:
        drakit.nri_up(True)
    proc.wait_ready(timeout=90)  # the plugin reconnects: ready again
    wait_for(
        lambda: _allowed(node, namespace, "held"),
        timeout=240,
        what="the held container to start once drakit's NRI plugin is back",
    )
    cpus = _claim_cpus(cp, drakit, namespace, "held")
    assert _allowed(node, namespace, "held") == cpus
    delete_pod(cp, namespace, "held")


def test_without_fail_closed_a_claimed_container_starts_without_the_plugin(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    claim_template(cp, namespace, "cpu", drakit.cls)
    drakit.stop()
    drakit.nri_up(False)
    try:
        drakit.start(fail_closed=False)  # ready: NRI absence alone does not make it unready
        _start(cp, node, namespace, "open", claim=True)
        wait_for(lambda: _allowed(node, namespace, "open"), timeout=90, what="open to print")
        assert _allowed(node, namespace, "open") == _online(), "unenforced: every CPU"
        delete_pod(cp, namespace, "open")
    finally:
        drakit.stop()
        drakit.nri_up(True)
        drakit.start()


def test_the_plugin_reconnects_when_containerd_restarts(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    proc = drakit.proc
    assert proc is not None
    synced = proc.log().count("NRI: synchronized")
    node.stop_process("containerd")
    node.start_containerd()
    wait_for(
        lambda: proc.log().count("NRI: synchronized") > synced,
        timeout=120,
        what="drakit's NRI plugin to reconnect to the restarted containerd",
    )
    proc.wait_ready(timeout=60)
    claim_template(cp, namespace, "cpu", drakit.cls)
    _start(cp, node, namespace, "after", claim=True)
    wait_for(lambda: _allowed(node, namespace, "after"), timeout=120, what="after to print")
    assert _allowed(node, namespace, "after") == _claim_cpus(cp, drakit, namespace, "after")
    delete_pod(cp, namespace, "after")


def test_during_a_rolling_update_one_instance_holds_nri_and_the_other_takes_over(
    control_plane: ControlPlane, real_node: RealNode, drakit: Drakit, namespace: str
) -> None:
    cp, node = control_plane, real_node
    old = drakit.proc
    assert old is not None
    new = drakit.start()  # a second instance beside the first: ready, in standby
    try:
        assert "NRI: another drakit instance holds" in new.log()
        claim_template(cp, namespace, "cpu", drakit.cls)
        _start(cp, node, namespace, "both", claim=True)  # one plugin answers: no conflict
        wait_for(lambda: _allowed(node, namespace, "both"), timeout=120, what="both to print")
        cpus = _claim_cpus(cp, drakit, namespace, "both")
        assert _allowed(node, namespace, "both") == cpus
        assert "NRI: synchronized" not in new.log()
    finally:
        old.close()
    wait_for(lambda: "NRI: synchronized" in new.log(), timeout=60, what="the new one to take over")
    delete_pod(cp, namespace, "both")
