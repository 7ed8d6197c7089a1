"""GPU-NIC pairs end to end: the real scheduler never hands out a member alone and in a pair.

One ``drakit node`` per module on ``h200-8gpu-8ainic`` with the NVIDIA GPU, AINIC and composite
backends under one driver (``docs/composite.md``): 8 GPUs, 8 NICs (``ainic-0`` in shared mode,
the others whole PFs) and the 8 pairs, every GPU and NIC a counter set that the lone device and
the pair holding it both consume. The DeviceClasses are the ones ``drakit deviceclasses``
renders for that configuration (selecting by ``type`` under the shared driver).

Shown with the real kube-scheduler:

* eight one-pair claims are allocated, then a claim for one GPU alone stays unallocated;
* the other way round: a lone GPU first, then eight one-pair claims: seven are allocated, one
  stays unallocated;
* a share of the shared-mode NIC first: the pair holding that NIC stays unallocated, while two
  more shares of the NIC still fit beside the first;
* the kubelet stand-in prepares a pair pod: its CDI spec has the GPU's device nodes and the
  NIC's ``/dev/infiniband`` nodes, both backends' env, and the checkpoint records each member
  under its own backend; unprepare removes all of it;
* a node killed (-9) between the two members of a pair's prepare, restarted and asked to
  unprepare, leaves neither member prepared (``prepare-after-member``, ``drakit.prepare.faults``);
* a NIC whose link goes down (in the simulated sysfs) makes the pair holding it Unhealthy on
  the kubelet health stream and puts the unhealthy taint on the pair's slice entry (with
  ``health.taint_unhealthy``), and recovery clears both.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    RESOURCE,
    NodeDirs,
    NodeProcess,
    Running,
    allocated_claim,
    create_claim,
    create_pod,
    kubelet_flags,
    running_node,
)

from drakit.deviceclasses import render_device_classes
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef
from drakit.sim import build_profile
from drakit_amd_ainic.sim import set_link

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
DRIVER = "gpu-nic.e2e.drakit.io"
ATTR = f'device.attributes["{DRIVER}"]'


def _plugins() -> dict[str, dict[str, Any]]:
    return {
        "nvidia_gpu": {"driver": DRIVER},
        "amd_ainic": {
            "driver": DRIVER,
            "nics": [{"select": {"pf_names": ["enp24s0"]}, "mode": "shared", "vf_limit": 4}],
        },
        "composite": {"driver": DRIVER, "numa_classes": 0},
    }


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    cp = control_plane
    suffix = uuid.uuid4().hex[:6]
    dirs = NodeDirs.create("dk-pairs-")
    plugins = _plugins()
    classes = _install_classes(cp, plugins, suffix)
    root = build_profile(PROFILE, dirs.root / "sim")
    settings = {"health": {"interval": 0.5, "taint_unhealthy": True}}
    try:
        with running_node(
            cp,
            "pairs",
            plugins,
            sysfs_root=root,
            settings=settings,
            dirs=dirs,
            ready_timeout=90,
            classes=classes,
        ) as node:
            _wait_published(cp, node.name, 24)
            yield node
    finally:
        for own in classes.values():
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{own}")


def _install_classes(cp: ControlPlane, plugins: dict[str, Any], suffix: str) -> dict[str, str]:
    """drakit's classes for ``plugins``, created under names of this module's own.

    Returns drakit's class name -> the created copy's. Without extended resources: a cluster
    has one class per extended resource.
    """
    with open_host(DrakitSettings(profile=PROFILE, plugins=plugins)) as host:
        objects = render_device_classes(host.driver_names(), host.device_classes(), {})
    classes: dict[str, str] = {}
    for obj in objects:
        own = f"{obj['metadata']['name']}-{suffix}"
        classes[obj["metadata"]["name"]] = own
        obj["metadata"]["name"] = own
        obj["spec"].pop("extendedResourceName", None)
        cp.api("POST", f"{RESOURCE}/deviceclasses", obj)
    return classes


def _wait_published(cp: ControlPlane, node: str, count: int, driver: str = DRIVER) -> None:
    def devices() -> int | None:
        items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
        n = sum(
            len(s["spec"].get("devices") or [])
            for s in items["items"]
            if s["spec"]["driver"] == driver
        )
        return n if n == count else None

    wait_for(devices, timeout=90, what=f"{count} devices of {driver} published")


def _claim_and_pod(
    cp: ControlPlane, ns: str, name: str, node: Running, cls: str, cel: str | None = None
) -> None:
    exactly: dict[str, Any] = {"deviceClassName": node.classes[cls]}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    _post_claim_and_pod(cp, ns, name, node.name, exactly)


def _post_claim_and_pod(
    cp: ControlPlane, ns: str, name: str, node: str, exactly: dict[str, Any]
) -> None:
    """A claim of one ``exactly`` request and a pod on ``node`` that uses it (same name)."""
    create_claim(cp, ns, name, {"devices": {"requests": [{"name": "r", "exactly": exactly}]}})
    create_pod(cp, ns, name, node, claim=name)


def _allocated(cp: ControlPlane, ns: str, name: str) -> list[dict[str, Any]]:
    claim = cp.api("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")
    alloc = claim.get("status", {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def _bound(cp: ControlPlane, ns: str, pod: str) -> bool:
    return bool(cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")["spec"].get("nodeName"))


def _unschedulable(cp: ControlPlane, ns: str, pod: str) -> bool:
    p = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in p.get("status", {}).get("conditions", [])
    )


def _wait_bound(cp: ControlPlane, ns: str, pods: list[str]) -> None:
    wait_for(
        lambda: all(_bound(cp, ns, p) for p in pods), timeout=120, what=f"{len(pods)} pods bound"
    )


def _wait_pending(cp: ControlPlane, ns: str, pod: str) -> None:
    wait_for(lambda: _unschedulable(cp, ns, pod), timeout=90, what=f"{pod} unschedulable")
    assert not _allocated(cp, ns, pod), f"{pod}'s claim was allocated"
    assert not _bound(cp, ns, pod)


def _release(cp: ControlPlane, ns: str, names: list[str]) -> None:
    """Delete the pods and claims and wait until the claims are gone (devices free again)."""
    grace = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    for n in names:
        for path, body in (
            (f"/api/v1/namespaces/{ns}/pods/{n}", grace),
            (f"{RESOURCE}/namespaces/{ns}/resourceclaims/{n}", None),
        ):
            try:
                cp.api("DELETE", path, body)
            except ControlPlaneError as e:
                if "HTTP 404" not in str(e):  # already gone
                    raise

    def gone() -> bool:
        for n in names:
            try:
                cp.api("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{n}")
            except ControlPlaneError:
                continue
            return False
        return True

    wait_for(gone, timeout=90, what="the claims released")


def _members(cp: ControlPlane, node: Running, pair: str) -> tuple[str, str]:
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node.name}")
    [dev] = [d for s in items["items"] for d in s["spec"].get("devices") or [] if d["name"] == pair]
    return dev["attributes"]["gpu"]["string"], dev["attributes"]["nic"]["string"]


def test_eight_pairs_then_a_lone_gpu_stays_pending(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    pairs = [f"pair{i}" for i in range(8)]
    for p in pairs:
        _claim_and_pod(cp, ns, p, node, "gpu-nic-pair")
    _wait_bound(cp, ns, pairs)
    got = sorted(r["device"] for p in pairs for r in _allocated(cp, ns, p))
    assert got == [f"pair-{i}" for i in range(8)]
    _claim_and_pod(cp, ns, "lone", node, "nvidia-gpu", f'{ATTR}.type == "gpu"')
    _wait_pending(cp, ns, "lone")
    # a NIC alone does not fit either: every PF is inside a pair
    _claim_and_pod(cp, ns, "nic", node, "amd-ainic")
    _wait_pending(cp, ns, "nic")
    _release(cp, ns, [*pairs, "lone", "nic"])


def test_a_lone_gpu_then_only_seven_pairs(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    _claim_and_pod(cp, ns, "lone", node, "nvidia-gpu", f'{ATTR}.type == "gpu"')
    _wait_bound(cp, ns, ["lone"])
    [lone] = _allocated(cp, ns, "lone")
    assert lone["device"].startswith("gpu-")
    pairs = [f"pair{i}" for i in range(8)]
    for p in pairs:
        _claim_and_pod(cp, ns, p, node, "gpu-nic-pair")
    wait_for(
        lambda: sum(_bound(cp, ns, p) for p in pairs) == 7,
        timeout=120,
        what="seven pair pods bound",
    )
    [left] = [p for p in pairs if not _bound(cp, ns, p)]
    _wait_pending(cp, ns, left)
    held = [r["device"] for p in pairs for r in _allocated(cp, ns, p)]
    assert len(set(held)) == 7
    assert lone["device"] not in {_members(cp, node, d)[0] for d in held}
    _release(cp, ns, ["lone", *pairs])


def test_a_share_of_the_shared_nic_keeps_its_pair_out_not_other_shares(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    shared = f'{ATTR}.type == "shared"'
    _claim_and_pod(cp, ns, "share0", node, "amd-ainic", shared)
    _wait_bound(cp, ns, ["share0"])
    [share] = _allocated(cp, ns, "share0")
    assert share["device"] == "ainic-0"
    assert share.get("shareID")
    _claim_and_pod(cp, ns, "pair", node, "gpu-nic-pair", f'{ATTR}.nic == "ainic-0"')
    _wait_pending(cp, ns, "pair")
    for p in ("share1", "share2"):
        _claim_and_pod(cp, ns, p, node, "amd-ainic", shared)
    _wait_bound(cp, ns, ["share1", "share2"])
    assert {r["device"] for p in ("share1", "share2") for r in _allocated(cp, ns, p)} == {"ainic-0"}
    _release(cp, ns, ["share0", "share1", "share2", "pair"])


def _uid(cp: ControlPlane, ns: str, name: str) -> str:
    uid: str = cp.api("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")["metadata"]["uid"]
    return uid


def test_a_pair_pods_container_gets_the_gpus_and_the_nics_device_nodes(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    # a whole PF (the shared NIC's VFs are made on demand, by a kernel this test does not run)
    _claim_and_pod(cp, ns, "train", node, "gpu-nic-pair", f'{ATTR}.nic != "ainic-0"')
    _wait_bound(cp, ns, ["train"])
    [result] = _allocated(cp, ns, "train")
    gpu, nic = _members(cp, node, result["device"])
    uid = _uid(cp, ns, "train")
    flags = kubelet_flags(node.dirs, node.name, f"{ns}/train", drivers=[DRIVER])
    prepared = kubelet_standin.run("prepare", *flags)
    assert prepared.exit_code == 0, prepared.doc.get("error")
    [cdi_id] = prepared.doc["containers"]["c"]["cdi_devices"]
    spec = node.dirs.cdi_specs()[f"k8s.{DRIVER}-claim_{uid}.json"]
    [dev] = spec["devices"]
    assert cdi_id.endswith("=" + dev["name"])
    edits = dev["containerEdits"]
    paths = [d["path"] for d in edits["deviceNodes"]]
    assert f"/dev/nvidia{int(gpu.removeprefix('gpu-'))}" in paths  # the GPU backend's nodes
    assert "/dev/nvidiactl" in paths
    assert [p for p in paths if p.startswith("/dev/infiniband/uverbs")]  # the NIC backend's
    assert any(e.startswith("NVIDIA_VISIBLE_DEVICES=GPU-") for e in edits["env"])
    assert any(e.startswith("DRAKIT_AINIC_") for e in edits["env"])
    record = node.dirs.checkpoint(DRIVER)[uid]
    assert record["phase"] == "PrepareCompleted"
    assert {p: [d["device"] for d in ds] for p, ds in record["prepared"].items()} == {
        "composite": [result["device"]],
        "nvidia_gpu": [gpu],
        "amd_ainic": [nic],
    }
    pod_uid = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/train")["metadata"]["uid"]
    grace = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/train", grace)
    unprepared = kubelet_standin.run("unprepare", *flags, f"--pod-uid={pod_uid}")
    assert unprepared.exit_code == 0, (unprepared.doc, unprepared.stderr[-3000:])
    assert uid not in node.dirs.checkpoint(DRIVER)
    assert not [n for n in node.dirs.cdi_specs() if uid in n]
    _release(cp, ns, ["train"])


def test_killed_between_the_members_then_unprepared_leaves_neither_prepared(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    name = f"pcrash-{uuid.uuid4().hex[:6]}"
    dirs = NodeDirs.create("dk-pcrash-")
    plugins = _plugins()
    # built here, not by the node (--profile): a crashed process cannot remove its own tree
    root = build_profile(PROFILE, dirs.root / "sim")
    cp.create_node(name)

    def process(label: str, env: dict[str, str] | None = None) -> NodeProcess:
        return NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins=plugins,
            sysfs_root=root,
            instance_id="pcrash",
            env=env,
            name=label,
        )

    try:
        with process("crash", {"DRAKIT_CRASH_AT": "prepare-after-member"}) as doomed:
            here = Running(name, dirs, doomed, classes=node.classes)
            doomed.wait_ready(timeout=90)
            _wait_published(cp, name, 24)
            _claim_and_pod(cp, ns, "victim", here, "gpu-nic-pair", f'{ATTR}.nic != "ainic-0"')
            _wait_bound(cp, ns, ["victim"])
            [result] = _allocated(cp, ns, "victim")
            gpu, _ = _members(cp, here, result["device"])
            ref = ClaimRef(namespace=ns, name="victim", uid=_uid(cp, ns, "victim"))
            with pytest.raises(Exception), doomed.client(DRIVER) as client:  # noqa: B017, PT011
                client.prepare([ref])  # the node dies inside: the call fails
            assert doomed.wait(timeout=30) == -signal.SIGKILL
        # killed after the GPU was prepared and recorded, before the NIC was asked
        between = dirs.checkpoint(DRIVER)[ref.uid]
        assert between["phase"] == "PrepareStarted"
        assert [d["device"] for d in between["prepared"]["nvidia_gpu"]] == [gpu]
        assert "amd_ainic" not in between["prepared"]
        with process("restart") as proc:
            proc.wait_ready(timeout=90)
            with proc.client(DRIVER) as client:
                assert client.unprepare([ref])[ref.uid].error == ""
            assert ref.uid not in dirs.checkpoint(DRIVER)
            assert not [n for n in dirs.cdi_specs() if ref.uid in n]
            ledger = dirs.state_dir / "plugin_state" / "amd_ainic"
            assert not [f for f in ledger.glob("*") if ref.uid in f.read_text(errors="ignore")]
            assert proc.terminate() == 0
        _release(cp, ns, ["victim"])
    finally:
        cp.delete_node(name)
        dirs.remove()


@pytest.mark.parametrize("damage", ["junk", "deleted"])
def test_a_junked_checkpoint_never_prepares_a_prepared_pairs_member_again(
    control_plane: ControlPlane, node: Running, namespace: str, damage: str
) -> None:
    """Issue 30, class 1: the checkpoint damaged while a pair runs, the node restarted.

    A claim allocated (by hand: a stale allocation the scheduler's counters would not make) to
    the pair's GPU or NIC alone is refused by the node; other devices are served.
    """
    cp, ns = control_plane, namespace
    name = f"pjunk-{uuid.uuid4().hex[:6]}"
    dirs = NodeDirs.create("dk-pjunk-")
    cp.create_node(name)

    def process(label: str) -> NodeProcess:
        return NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins=_plugins(),
            profile=PROFILE,
            instance_id="pjunk",
            name=label,
        )

    try:
        with process("first") as first:
            here = Running(name, dirs, first, classes=node.classes)
            first.wait_ready(timeout=90)
            _wait_published(cp, name, 24)
            _claim_and_pod(cp, ns, "pair", here, "gpu-nic-pair", f'{ATTR}.nic != "ainic-0"')
            _wait_bound(cp, ns, ["pair"])
            [result] = _allocated(cp, ns, "pair")
            gpu, nic = _members(cp, here, result["device"])
            ref = ClaimRef(namespace=ns, name="pair", uid=_uid(cp, ns, "pair"))
            with first.client(DRIVER) as client:
                assert client.prepare([ref])[ref.uid].error == ""
            assert first.terminate() == 0
        path = dirs.state_dir / DRIVER / "checkpoint.json"
        if damage == "junk":
            path.write_text("{ junk")
        else:
            path.unlink()
        lone = {}
        for member in (gpu, nic):
            claim_name = f"lone-{member}"
            made = allocated_claim(
                cp,
                ns,
                claim_name,
                [{"request": "r", "driver": DRIVER, "pool": name, "device": member}],
                device_class=node.classes["gpu-nic-pair"],
            )
            lone[member] = ClaimRef(namespace=ns, name=claim_name, uid=made["metadata"]["uid"])
        with process("restart") as proc:
            proc.wait_ready(timeout=90)
            with proc.client(DRIVER) as client:
                got = client.prepare(list(lone.values()))
            for member, r in lone.items():
                err = got[r.uid].error
                assert f"device {member!r} is still prepared for claim with UID {ref.uid}" in err
                assert not [n for n in dirs.cdi_specs() if r.uid in n]
            with proc.client(DRIVER) as client:
                assert client.unprepare([ref])[ref.uid].error == ""
                again = client.prepare(list(lone.values()))
            assert all(again[r.uid].error == "" for r in lone.values()), again
            with proc.client(DRIVER) as client:
                client.unprepare(list(lone.values()))
            assert proc.terminate() == 0
        assert list(dirs.state_dir.joinpath(DRIVER).glob("checkpoint.json.corrupt-*")) or (
            damage == "deleted"
        )
        _release(cp, ns, ["pair"])
        for r in lone.values():
            cp.api("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{r.name}")
    finally:
        cp.delete_node(name)
        dirs.remove()


def _entries(cp: ControlPlane, node: Running) -> list[dict[str, Any]]:
    items = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node.name}")
    return [d for s in items["items"] for d in s["spec"].get("devices") or []]


def _entry(cp: ControlPlane, node: Running, device: str) -> dict[str, Any]:
    [dev] = [d for d in _entries(cp, node) if d["name"] == device]
    return dev


def _health(standin: KubeletStandIn, node: Running) -> dict[str, str]:
    assert node.proc is not None
    got = standin.run(
        "raw-health",
        f"--endpoint={node.proc.dra_socket(DRIVER)}",
        "--service=v1",
        "--seconds=10",
        "--max-responses=1",
    )
    assert got.exit_code == 0, got.doc
    [first] = got.doc["responses"]
    return {d["device"]["device_name"]: str(d["health"]) for d in first["devices"]}


def test_a_nic_with_its_link_down_taints_the_pair_holding_it(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running
) -> None:
    cp = control_plane
    assert node.root is not None
    [pair] = [
        d["name"]
        for d in _entries(cp, node)
        if d["attributes"].get("nic", {}).get("string") == "ainic-3"
    ]
    assert not _entry(cp, node, pair).get("taints")
    set_link(node.root, "enp94s0", up=False)  # ainic-3
    try:
        wait_for(
            lambda: _entry(cp, node, pair).get("taints"),
            timeout=30,
            what=f"the unhealthy taint on {pair}",
        )
        [taint] = _entry(cp, node, pair)["taints"]
        assert (taint["key"], taint["effect"]) == ("drakit.io/unhealthy", "NoSchedule")
        assert _entry(cp, node, "ainic-3")["taints"]
        gpu, _ = _members(cp, node, pair)
        assert not _entry(cp, node, gpu).get("taints")  # the pair's GPU alone is fine
        health = _health(kubelet_standin, node)
        assert health[pair] == health["ainic-3"] == "UNHEALTHY"
        assert health[gpu] == "HEALTHY"
    finally:
        set_link(node.root, "enp94s0", up=True)
    wait_for(
        lambda: not _entry(cp, node, pair).get("taints") or None,
        timeout=30,
        what="the taint to clear",
    )
    assert _health(kubelet_standin, node)[pair] == "HEALTHY"
