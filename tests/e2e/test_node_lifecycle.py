"""SIGTERM and rolling updates of ``drakit node`` processes on one node.

* SIGTERM while a prepare is in flight (its claim GET held back by a slow API server): the call
  still completes with its devices, no new kubelet call is accepted once the signal is handled,
  the process exits 0, every socket it created is gone and its ResourceSlices stay in the API
  (the successor adopts them).
* Rolling update: two instances (different ``POD_UID``) on one node share the kubelet, state and
  CDI directories. Both register (registration sockets side by side, ``raw-getinfo`` answers on
  both), their slices settle (no write war), and claims prepared concurrently through both are
  serialised by the state directory's lock: every claim is in the shared checkpoint and no two
  CPU shares of the same NUMA device overlap. Claims prepared by one are unprepared by the
  other; stopping the old instance leaves the new one's sockets and the slices alone.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    NodeProcess,
    Proxy,
    allocated_claim,
    create_device_class,
    kubeconfig_via,
)

from drakit.cpuset import parse_cpulist
from drakit.kubelet._proto import dra_v1_pb2 as v1
from drakit.kubelet._proto import dra_v1_pb2_grpc as v1_grpc
from drakit.models import ClaimPrepareResult, ClaimRef

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
CPU, GPU, NIC = DRIVERS["cpu"], DRIVERS["nvidia_gpu"], DRIVERS["amd_ainic"]


@pytest.fixture
def classes(control_plane: ControlPlane) -> Iterator[dict[str, str]]:
    """A DeviceClass per driver used here: driver -> class name."""
    suffix = uuid.uuid4().hex[:6]
    made = {d: f"life-{d.split('.')[0]}-{suffix}" for d in (CPU, GPU, NIC)}
    for driver, name in made.items():
        create_device_class(control_plane, name, driver)
    try:
        yield made
    finally:
        for name in made.values():
            control_plane.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


@pytest.fixture
def dirs() -> Iterator[NodeDirs]:
    d = NodeDirs.create("dk-life-")
    try:
        yield d
    finally:
        d.remove()


def slice_versions(cp: ControlPlane, node: str) -> dict[str, str]:
    """Name -> resourceVersion of the node's ResourceSlices."""
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return {s["metadata"]["name"]: s["metadata"]["resourceVersion"] for s in items}


def dra_accepts(socket: Path) -> bool:
    """Whether a DRA socket still takes a new call (an unprepare of an unknown claim)."""
    if not socket.exists():
        return False
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = v1_grpc.DRAPluginStub(channel)
        request = v1.NodeUnprepareResourcesRequest(
            claims=[v1.Claim(namespace="x", name="probe", uid=str(uuid.uuid4()))]
        )
        try:
            stub.NodeUnprepareResources(request, timeout=2)
        except grpc.RpcError:
            return False
    return True


def test_sigterm_finishes_the_call_in_flight_removes_sockets_keeps_slices(
    control_plane: ControlPlane,
    fake_node: Callable[..., dict[str, Any]],
    profile_root: Callable[[str], Path],
    classes: dict[str, str],
    dirs: NodeDirs,
    namespace: str,
) -> None:
    cp = control_plane
    name = fake_node()["metadata"]["name"]
    proxy = Proxy(("127.0.0.1", cp.api_port))
    proxy.start()
    proc = NodeProcess(
        kubeconfig=kubeconfig_via(cp, proxy.port, dirs.root / "kubeconfig"),
        node_name=name,
        dirs=dirs,
        plugins={"amd_ainic": {}, "cpu": {}, "nvidia_gpu": {}},
        sysfs_root=profile_root(PROFILE),
        instance_id="term",
    )
    try:
        with proc:
            proc.wait_ready(timeout=60)
            slices = slice_versions(cp, name)
            assert len(slices) == len(proc.drivers)
            claim = allocated_claim(
                cp,
                namespace,
                "nic",
                [{"request": "nic", "driver": NIC, "pool": name, "device": "ainic-3"}],
                device_class=classes[NIC],
            )
            ref = ClaimRef(namespace=namespace, name="nic", uid=claim["metadata"]["uid"])
            # The slow call goes to the driver that sorts first: the one a shutdown that
            # stopped drivers one by one would wait on while the others kept accepting.
            assert proc.drivers[0] == NIC
            outcome: dict[str, Any] = {}

            def prepare() -> None:
                with proc.client(NIC, timeout=60) as client:
                    outcome["result"] = client.prepare([ref])[ref.uid]
                outcome["done"] = time.monotonic()

            with proxy.slowed(3.0):  # every reply of the API server now takes >= 3 s
                caller = threading.Thread(target=prepare)
                caller.start()
                wait_for(
                    lambda: f"NodePrepareResources(v1) driver={NIC}" in proc.log(),
                    timeout=30,
                    interval=0.05,
                    what="the prepare to be in flight",
                )
                os.kill(proc.pid, signal.SIGTERM)
                term = time.monotonic()
                wait_for(
                    lambda: not proc.registration_socket(NIC).exists(),
                    timeout=10,
                    interval=0.05,
                    what="the registration socket to go",
                )
                assert caller.is_alive(), "the call ended before the checks; make it slower"
                accepting = {
                    d: dra_accepts(proc.dra_socket(d)) for d in proc.drivers
                }  # while the call is still in flight
                assert caller.is_alive(), "the call ended during the checks; make it slower"
                caller.join(timeout=60)
            result: ClaimPrepareResult = outcome["result"]
            assert result.error == ""
            assert [d.device for d in result.devices] == ["ainic-3"]
            assert outcome["done"] > term
            assert proc.wait(timeout=60) == 0, proc.log_tail()
    finally:
        proxy.stop()
    assert not accepting[NIC]
    assert [s for s in proc.sockets() if s.exists()] == []
    assert sorted(p.name for p in dirs.registry.iterdir()) == []
    assert slice_versions(cp, name) == slices  # left in place, not even rewritten
    assert dirs.checkpoint(NIC)[ref.uid]["phase"] == "PrepareCompleted"
    assert "received SIGTERM: shutting down" in proc.log()
    assert not any(accepting.values()), f"new calls accepted after SIGTERM: {accepting}"


def test_rolling_update_two_instances_share_state_without_racing(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    fake_node: Callable[..., dict[str, Any]],
    profile_root: Callable[[str], Path],
    classes: dict[str, str],
    dirs: NodeDirs,
    namespace: str,
) -> None:
    cp = control_plane
    name = fake_node()["metadata"]["name"]

    def instance(uid: str) -> NodeProcess:
        return NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins={"cpu": {}},
            sysfs_root=profile_root(PROFILE),
            instance_id=uid,
        )

    with instance("old-pod") as old:
        old.wait_ready(timeout=60)
        with instance("new-pod") as new:
            new.wait_ready(timeout=60)
            # Both registered, side by side.
            regs = {old.registration_socket(CPU), new.registration_socket(CPU)}
            assert len(regs) == 2
            assert {p for p in dirs.registry.iterdir()} == regs
            for proc in (old, new):
                info = kubelet_standin.run(
                    "raw-getinfo", f"--socket={proc.registration_socket(CPU)}", "--notify=auto"
                )
                assert info.exit_code == 0, info.doc
                assert info.doc["unknown_fields"] == []
                assert info.doc["info"]["endpoint"] == str(proc.dra_socket(CPU))
            # Two publishers of the same slices settle: no write war.
            versions = slice_versions(cp, name)
            time.sleep(3)
            assert slice_versions(cp, name) == versions

            # 16 claims of 4 CPUs on one NUMA device, prepared 16 at a time through both.
            claims = [
                allocated_claim(
                    cp,
                    namespace,
                    f"c{i}",
                    [
                        {
                            "request": "cpus",
                            "driver": CPU,
                            "pool": name,
                            "device": "cpu-numa-0",
                            "shareID": str(uuid.uuid4()),
                            "consumedCapacity": {"cpu": "4"},
                        }
                    ],
                    device_class=classes[CPU],
                )
                for i in range(16)
            ]
            refs = [
                ClaimRef(namespace=namespace, name=c["metadata"]["name"], uid=c["metadata"]["uid"])
                for c in claims
            ]
            with old.client(CPU) as via_old, new.client(CPU) as via_new:
                clients = (via_old, via_new)

                def prepare(i: int) -> ClaimPrepareResult:
                    return clients[i % 2].prepare([refs[i]])[refs[i].uid]

                with ThreadPoolExecutor(max_workers=len(refs)) as pool:
                    results = list(pool.map(prepare, range(len(refs))))
                assert [r.error for r in results] == [""] * len(refs)
                checkpoint = dirs.checkpoint(CPU)
                assert set(checkpoint) == {r.uid for r in refs}  # no lost update
                cpusets = [
                    parse_cpulist(checkpoint[r.uid]["prepared"]["cpu"][0]["state"]["cpus"])
                    for r in refs
                ]
                assert [len(s) for s in cpusets] == [4] * len(refs)
                taken: set[int] = set()
                for cpus in cpusets:
                    assert not cpus & taken, f"CPUs {sorted(cpus & taken)} handed out twice"
                    taken |= cpus
                assert len(dirs.cdi_specs()) == len(refs)

                # Each instance unprepares what the other prepared.
                for i, ref in enumerate(refs):
                    assert clients[(i + 1) % 2].unprepare([ref])[ref.uid].error == ""
            assert dirs.checkpoint(CPU) == {}
            assert dirs.cdi_specs() == {}

            # The old instance goes; the new one keeps its sockets, the slices stay.
            assert old.terminate() == 0
            assert {p for p in dirs.registry.iterdir()} == {new.registration_socket(CPU)}
            assert new.dra_socket(CPU).exists()
            assert slice_versions(cp, name) == versions
            with new.client(CPU) as client:
                assert client.prepare([refs[0]])[refs[0].uid].error == ""
                assert client.unprepare([refs[0]])[refs[0].uid].error == ""
            assert new.terminate() == 0
