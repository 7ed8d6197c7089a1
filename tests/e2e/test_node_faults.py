"""Faults around a running ``drakit node``: lost slices, an API server outage, bad claims.

* ResourceSlices deleted or edited by hand while the node runs are restored within 5 s.
* The API server unreachable for 60 s (a TCP proxy between node and API server is closed): the
  node keeps running, a prepare that needs a claim GET fails for that claim only with a
  retryable error ("will retry"), and once the proxy is back the slices deleted meanwhile are
  restored within 10 s and the same prepare succeeds.
* Bad claims through the real wire (the kubelet stand-in's strict ``raw-prepare``, claims read
  from the API server): a device the node does not have, an unknown pool, an invalid opaque
  config and a config kind no plugin owns each fail with an error naming the claim, the request
  and the field, while a good claim in the same call is prepared. Opaque parameters over 10 KiB
  never reach a node: the API server refuses them (checked here too).
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    DRIVERS,
    RESOURCE,
    NodeDirs,
    NodeProcess,
    Proxy,
    Running,
    allocated_claim,
    device_classes,
    kubeconfig_via,
    running_node,
)

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
CPU, GPU = DRIVERS["cpu"], DRIVERS["nvidia_gpu"]


@pytest.fixture(scope="module")
def cpu_class(control_plane: ControlPlane) -> Iterator[str]:
    with device_classes(control_plane, "faults", {"cpu": CPU}) as made:
        yield made["cpu"]


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane, profile_root: Callable[[str], Path], cpu_class: str
) -> Iterator[Running]:
    plugins: dict[str, dict[str, Any]] = {"cpu": {}, "nvidia_gpu": {}}
    root = profile_root(PROFILE)
    with running_node(control_plane, "faults", plugins, sysfs_root=root) as node:
        node.classes["cpu"] = cpu_class
        yield node
        assert node.proc.returncode is None, node.proc.log_tail()


def slices_of(cp: ControlPlane, node: str) -> dict[str, dict[str, Any]]:
    """The node's ResourceSlices by name."""
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")["items"]
    return {s["metadata"]["name"]: s for s in items}


def devices_of(slices: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Slice name -> its devices, as the API server stores them."""
    return {n: s["spec"].get("devices", []) for n, s in slices.items()}


def restored_within(
    cp: ControlPlane, node: str, want: dict[str, list[dict[str, Any]]], limit: float
) -> float:
    """Seconds until the node's slices hold ``want`` again (fails after ``limit`` + 20 s)."""
    start = time.monotonic()
    wait_for(
        lambda: devices_of(slices_of(cp, node)) == want,
        timeout=limit + 20,
        interval=0.05,
        what="the slices to be restored",
    )
    return time.monotonic() - start


# ------------------------------------------------------------------ slices by hand


def test_slices_deleted_by_hand_are_restored_within_5s(
    control_plane: ControlPlane, node: Running
) -> None:
    before = slices_of(control_plane, node.name)
    assert {s["spec"]["driver"] for s in before.values()} == {CPU, GPU}
    want = devices_of(before)
    gone = control_plane.api(
        "DELETE", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node.name}"
    )
    assert len(gone["items"]) == len(want)
    took = restored_within(control_plane, node.name, want, 5)
    print(f"\n[faults] {len(want)} deleted slices restored in {took:.2f}s")
    assert took < 5


def test_slice_edited_by_hand_is_restored_within_5s(
    control_plane: ControlPlane, node: Running
) -> None:
    before = slices_of(control_plane, node.name)
    want = copy.deepcopy(devices_of(before))
    name = next(n for n, s in before.items() if s["spec"]["driver"] == GPU)
    edited = before[name]
    edited["spec"]["devices"][0]["attributes"]["productName"] = {"string": "tampered"}
    del edited["spec"]["devices"][-1]
    written = control_plane.api("PUT", f"{RESOURCE}/resourceslices/{name}", edited)
    assert written["spec"]["devices"] == edited["spec"]["devices"] != want[name]
    took = restored_within(control_plane, node.name, want, 5)
    print(f"\n[faults] edited slice restored in {took:.2f}s")
    assert took < 5


# ------------------------------------------------------------------ bad claims


def cpu_result(node: str, *, device: str = "cpu-numa-0", pool: str | None = None) -> dict[str, Any]:
    return {
        "request": "cpus",
        "driver": CPU,
        "pool": pool or node,
        "device": device,
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": {"cpu": "2"},
    }


def cpu_config(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "source": "FromClaim",
            "requests": ["cpus"],
            "opaque": {"driver": CPU, "parameters": parameters},
        }
    ]


def test_bad_claims_fail_alone_with_claim_request_and_field(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    cp, n = control_plane, node.name
    cfg = {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig"}
    cases: dict[str, tuple[dict[str, Any], list[dict[str, Any]], list[str]]] = {
        "good": (cpu_result(n), cpu_config({**cfg, "policy": "distributed"}), []),
        "no-such-device": (
            cpu_result(n, device="cpu-numa-7"),
            [],
            ["request 'cpus'", "status.allocation.devices.results[0]", "'cpu-numa-7'"],
        ),
        "unknown-pool": (
            cpu_result(n, pool="someone-elses-pool"),
            [],
            ["request 'cpus'", "status.allocation.devices.results[0]", "'someone-elses-pool'"],
        ),
        "invalid-config": (
            cpu_result(n),
            cpu_config({**cfg, "policy": "bogus"}),
            [
                "requests ['cpus']",
                "status.allocation.devices.config[0].opaque.parameters",
                "policy",
            ],
        ),
        "unowned-kind": (
            cpu_result(n),
            cpu_config({"apiVersion": "example.com/v1", "kind": "Mystery"}),
            [
                "requests ['cpus']",
                "status.allocation.devices.config[0].opaque.parameters",
                "kind",
                "example.com/v1/Mystery",
            ],
        ),
    }
    uids: dict[str, str] = {}
    for name, (result, config, _) in cases.items():
        claim = allocated_claim(
            cp, namespace, name, [result], device_class=node.classes["cpu"], config=config
        )
        uids[name] = claim["metadata"]["uid"]

    # Over 10 KiB of opaque parameters: the API server itself refuses the allocation.
    with pytest.raises(ControlPlaneError, match=r"opaque\.parameters: Too long.*10240 bytes"):
        allocated_claim(
            cp,
            namespace,
            "oversized",
            [cpu_result(n)],
            device_class=node.classes["cpu"],
            config=cpu_config({**cfg, "padding": "x" * (10 * 1024 + 1)}),
        )

    refs = [f"--claim={namespace}/{name}/{uid}" for name, uid in uids.items()]
    endpoint = f"--endpoint={node.proc.dra_socket(CPU)}"
    got = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", *refs)
    assert got.exit_code == 0, got.doc
    assert got.doc["unknown_fields"] == []
    replies = got.doc["response"]["claims"]
    assert set(replies) == set(uids.values())
    for name, (_, _, must_name) in cases.items():
        reply = replies[uids[name]]
        if not must_name:
            assert reply["error"] == ""
            assert [d["device_name"] for d in reply["devices"]] == ["cpu-numa-0"]
            continue
        assert reply["devices"] == []
        error = reply["error"]
        for part in [f"claim {namespace}/{name}", *must_name]:
            assert part in error, (name, error)
    assert set(node.dirs.checkpoint(CPU)) == {uids["good"]}
    assert [f for f in node.dirs.cdi_files() if any(u in f for u in uids.values())] == [
        f"k8s.{CPU}-claim_{uids['good']}.json"
    ]

    done = kubelet_standin.run("raw-unprepare", endpoint, "--service=v1", *refs)
    assert done.exit_code == 0, done.doc
    assert {r["error"] for r in done.doc["response"]["claims"].values()} == {""}
    assert uids["good"] not in node.dirs.checkpoint(CPU)
    assert not [f for f in node.dirs.cdi_files() if uids["good"] in f]


# ------------------------------------------------------------------ outage

_RETRY = re.compile(
    r"(ResourceSlice watch|publishing ResourceSlices) failed \(retry in ([0-9.]+)s\)"
)


class SlowRecovery(AssertionError):
    """Recovery after an outage is not bounded by 10 s."""


def retry_waits(log: str) -> dict[str, list[float]]:
    """The backoff delays the node logged, per loop (the watch and the publisher)."""
    waits: dict[str, list[float]] = {}
    for m in _RETRY.finditer(log):
        waits.setdefault(m.group(1), []).append(float(m.group(2)))
    return waits


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_api_server_outage_of_60s(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    profile_root: Callable[[str], Path],
    fake_node: Callable[..., dict[str, Any]],
    cpu_class: str,
    namespace: str,
) -> None:
    cp = control_plane
    name = fake_node()["metadata"]["name"]
    dirs = NodeDirs.create("dk-outage-")
    proxy = Proxy(("127.0.0.1", cp.api_port))
    proxy.start()
    try:
        proc = NodeProcess(
            kubeconfig=kubeconfig_via(cp, proxy.port, dirs.root / "kubeconfig"),
            node_name=name,
            dirs=dirs,
            plugins={"cpu": {}},
            sysfs_root=profile_root(PROFILE),
            instance_id="outage",
        )
        with proc:
            proc.wait_ready(timeout=60)
            want = devices_of(slices_of(cp, name))
            claim = allocated_claim(cp, namespace, "c", [cpu_result(name)], device_class=cpu_class)
            ref = f"--claim={namespace}/c/{claim['metadata']['uid']}"
            endpoint = f"--endpoint={proc.dra_socket(CPU)}"

            proxy.stop()  # the API server is gone for this node
            down = time.monotonic()
            cp.api("DELETE", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={name}")
            got = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", ref)
            assert got.exit_code == 0, got.doc
            [reply] = got.doc["response"]["claims"].values()
            assert "will retry" in reply["error"], reply
            assert f"claim {namespace}/c" in reply["error"]
            assert claim["metadata"]["uid"] not in dirs.checkpoint(CPU)
            time.sleep(max(0.0, 60 - (time.monotonic() - down)))
            assert proc.returncode is None, proc.log_tail()
            assert proc.http("/healthz")[0] == 200
            readyz = proc.http("/readyz")

            proxy.start()  # back, on the same port
            took = restored_within(cp, name, want, 40)  # fails the test outright past 60 s
            again = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", ref)
            [reply] = again.doc["response"]["claims"].values()
            assert reply["error"] == "", reply
            assert proc.wait_ready(timeout=10) > 0
            done = kubelet_standin.run("raw-unprepare", endpoint, "--service=v1", ref)
            assert done.exit_code == 0, done.doc
            assert dirs.cdi_specs() == {}
            waits = retry_waits(proc.log())
            assert proc.terminate() == 0
    finally:
        proxy.stop()
        dirs.remove()
    longest = {loop: max(w) for loop, w in waits.items()}
    print(
        f"\n[outage] /readyz at the end of it: {readyz}; slices restored {took:.2f}s after it; "
        f"longest backoff per loop: {longest}"
    )
    # Restored within 10 s, and not by luck: one loop never waits longer than ~8 s, so it
    # retries within that long of the API server's return, however long the outage was.
    if took >= 10 or min(longest.values(), default=0.0) > 8:
        raise SlowRecovery(f"restored after {took:.1f}s; longest waits {longest}")


@pytest.mark.timeout(300)
def test_start_up_while_the_api_server_is_unreachable(
    control_plane: ControlPlane,
    kubelet_standin: KubeletStandIn,
    profile_root: Callable[[str], Path],
    fake_node: Callable[..., dict[str, Any]],
    cpu_class: str,
    namespace: str,
) -> None:
    """Issue 9 item 6: the node starts without the API server and serves the kubelet."""
    cp = control_plane
    name = fake_node()["metadata"]["name"]
    dirs = NodeDirs.create("dk-cold-")
    proxy = Proxy(("127.0.0.1", cp.api_port))
    proxy.start()

    def node_proc() -> NodeProcess:
        return NodeProcess(
            kubeconfig=kubeconfig_via(cp, proxy.port, dirs.root / "kubeconfig"),
            node_name=name,
            dirs=dirs,
            plugins={"cpu": {}},
            sysfs_root=profile_root(PROFILE),
            instance_id="cold",
        )

    try:
        first = node_proc()
        with first:
            first.wait_ready(timeout=60)
            held = allocated_claim(
                cp, namespace, "held", [cpu_result(name)], device_class=cpu_class
            )
            held_ref = f"--claim={namespace}/held/{held['metadata']['uid']}"
            endpoint = f"--endpoint={first.dra_socket(CPU)}"
            got = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", held_ref)
            [reply] = got.doc["response"]["claims"].values()
            assert reply["error"] == "", reply
            want = devices_of(slices_of(cp, name))
            assert first.terminate() == 0
        fresh = allocated_claim(
            cp, namespace, "fresh", [cpu_result(name, device="cpu-numa-1")], device_class=cpu_class
        )
        fresh_ref = f"--claim={namespace}/fresh/{fresh['metadata']['uid']}"
        cp.api("DELETE", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={name}")

        proxy.stop()  # the API server is unreachable when the node starts
        second = node_proc()
        with second:  # starts (and serves /healthz) although the API server is gone
            assert second.returncode is None, second.log_tail()
            status, why = second.http("/readyz")
            assert status == 503
            assert "ResourceSlices not published" in why
            assert "cannot reach the API server" in why or "pending" in why, why
            got = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", fresh_ref)
            [reply] = got.doc["response"]["claims"].values()
            assert "will retry" in reply["error"], reply
            done = kubelet_standin.run("raw-unprepare", endpoint, "--service=v1", held_ref)
            [reply] = done.doc["response"]["claims"].values()
            assert reply["error"] == "", reply  # from the checkpoint, no API server needed
            assert dirs.cdi_specs() == {}

            proxy.start()  # back: the slices are published and prepare works
            restored_within(cp, name, want, 60)
            assert second.wait_ready(timeout=30) > 0
            again = kubelet_standin.run("raw-prepare", endpoint, "--service=v1", fresh_ref)
            [reply] = again.doc["response"]["claims"].values()
            assert reply["error"] == "", reply
            kubelet_standin.run("raw-unprepare", endpoint, "--service=v1", fresh_ref)
            assert second.terminate() == 0
    finally:
        proxy.stop()
        dirs.remove()
