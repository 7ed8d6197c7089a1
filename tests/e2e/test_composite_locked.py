"""Locked-in CPU shares end to end: the real scheduler keeps shares and lone CPU claims apart.

One ``drakit node`` per module on ``h200-8gpu-8ainic`` with the CPU backend (grouped per NUMA
node, 112 CPUs each) and the composite dividing each group into 4 shares of 28 CPUs
(``plugins.composite.locked``), all under one driver (``docs/composite.md``): each group is a
counter set of 112 ``cpu`` that the lone group consumes whole and each share a quarter of. The
DeviceClasses are the ones ``drakit deviceclasses`` renders for that configuration.

Shown with the real kube-scheduler:

* one share of NUMA node 0 is allocated; the other three shares of that node still are; a lone
  CPU claim on NUMA node 0 stays unallocated while NUMA node 1 serves lone claims;
* the other way round: a lone CPU claim on NUMA node 0 first keeps that node's shares out, not
  those of NUMA node 1;
* the kubelet stand-in prepares a share's pod: the container gets 28 CPUs of the share's NUMA
  node from the CPU backend (on record under it), and unprepare removes them;
* the checkpoint junked while a share is prepared, the node restarted: neither the share's CPU
  group (a lone claim) nor a sibling share is prepared for another claim until the share is
  unprepared; the other NUMA node's devices are served meanwhile (issue 30, class 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, KubeletStandIn, wait_for
from tests.e2e.nodeproc import (
    RESOURCE,
    NodeDirs,
    NodeProcess,
    Running,
    allocated_claim,
    kubelet_flags,
    running_node,
)
from tests.e2e.test_composite_pairs import (
    _allocated,
    _bound,
    _install_classes,
    _post_claim_and_pod,
    _release,
    _uid,
    _wait_bound,
    _wait_pending,
    _wait_published,
)

from drakit.cpuset import parse_cpulist
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import ClaimRef

pytestmark = pytest.mark.e2e

PROFILE = "h200-8gpu-8ainic"
DRIVER = "cpus.e2e.drakit.io"
PLUGINS: dict[str, Any] = {
    "cpu": {},
    "composite": {
        "driver": DRIVER,
        "gpu_plugins": [],  # no pairs: the composite only divides the CPU groups
        "nic_plugins": [],
        "locked": [{"plugin": "cpu", "shares": 4}],
    },
}
NUMA = 'device.attributes["resource.kubernetes.io"].numaNode == {}'


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[Running]:
    cp = control_plane
    suffix = uuid.uuid4().hex[:6]
    classes = _install_classes(cp, PLUGINS, suffix)
    try:
        with running_node(
            cp, "locked", PLUGINS, profile=PROFILE, ready_timeout=90, classes=classes
        ) as node:
            _wait_published(cp, node.name, 10, DRIVER)
            yield node
    finally:
        for own in classes.values():
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{own}")


def _claim_and_pod(
    cp: ControlPlane, ns: str, name: str, node: Running, cls: str, numa: int, cpus: int = 0
) -> None:
    exactly: dict[str, Any] = {
        "deviceClassName": node.classes[cls],
        "selectors": [{"cel": {"expression": NUMA.format(numa)}}],
    }
    if cpus:
        exactly["capacity"] = {"requests": {"cpu": str(cpus)}}
    _post_claim_and_pod(cp, ns, name, node.name, exactly)


def test_one_share_keeps_the_other_shares_allocatable_and_lone_cpus_out(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    _claim_and_pod(cp, ns, "first", node, "cpu-share", 0)
    _wait_bound(cp, ns, ["first"])
    [first] = _allocated(cp, ns, "first")
    assert first["device"].startswith("cpu-numa-0-share-")
    more = ["s1", "s2", "s3"]
    for p in more:
        _claim_and_pod(cp, ns, p, node, "cpu-share", 0)
    _wait_bound(cp, ns, more)
    held = {r["device"] for p in ["first", *more] for r in _allocated(cp, ns, p)}
    assert held == {f"cpu-numa-0-share-{k}" for k in range(4)}
    # the group's counters are the shares': a lone CPU claim on NUMA node 0 does not fit ...
    _claim_and_pod(cp, ns, "lone0", node, "cpu", 0, cpus=2)
    _wait_pending(cp, ns, "lone0")
    # ... while NUMA node 1 serves lone claims, two of them side by side
    for p in ("lone1a", "lone1b"):
        _claim_and_pod(cp, ns, p, node, "cpu", 1, cpus=2)
    _wait_bound(cp, ns, ["lone1a", "lone1b"])
    assert {r["device"] for p in ("lone1a", "lone1b") for r in _allocated(cp, ns, p)} == {
        "cpu-numa-1"
    }
    _release(cp, ns, ["first", *more, "lone1a", "lone1b"])
    wait_for(lambda: _bound(cp, ns, "lone0"), timeout=120, what="lone0 bound once shares left")
    _release(cp, ns, ["lone0"])


def test_a_lone_cpu_claim_keeps_its_nodes_shares_out_not_the_other_nodes(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    _claim_and_pod(cp, ns, "lone", node, "cpu", 0, cpus=4)
    _wait_bound(cp, ns, ["lone"])
    _claim_and_pod(cp, ns, "share0", node, "cpu-share", 0)
    _wait_pending(cp, ns, "share0")
    _claim_and_pod(cp, ns, "share1", node, "cpu-share", 1)
    _wait_bound(cp, ns, ["share1"])
    [got] = _allocated(cp, ns, "share1")
    assert got["device"].startswith("cpu-numa-1-share-")
    _release(cp, ns, ["lone", "share0", "share1"])


def test_a_share_pods_container_gets_28_cpus_of_its_numa_node(
    control_plane: ControlPlane, kubelet_standin: KubeletStandIn, node: Running, namespace: str
) -> None:
    cp, ns = control_plane, namespace
    _claim_and_pod(cp, ns, "job", node, "cpu-share", 1)
    _wait_bound(cp, ns, ["job"])
    [result] = _allocated(cp, ns, "job")
    uid = _uid(cp, ns, "job")
    flags = kubelet_flags(node.dirs, node.name, f"{ns}/job", drivers=[DRIVER])
    prepared = kubelet_standin.run("prepare", *flags)
    assert prepared.exit_code == 0, prepared.doc.get("error")
    spec = node.dirs.cdi_specs()[f"k8s.{DRIVER}-claim_{uid}.json"]
    [dev] = spec["devices"]
    env = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    [cpus] = [v for k, v in env.items() if k.startswith("DRAKIT_CPUSET_CPU_NUMA_1_")]
    with open_host(DrakitSettings(profile=PROFILE, plugins=PLUGINS)) as host:
        root = host.node.sysfs_root
        numa1 = parse_cpulist((Path(root) / "sys/devices/system/node/node1/cpulist").read_text())
    assert len(parse_cpulist(cpus)) == 28
    assert parse_cpulist(cpus) <= numa1
    assert env[f"DRAKIT_{result['device'].upper().replace('-', '_')}_MEMBER"] == "cpu-numa-1"
    record = node.dirs.checkpoint(DRIVER)[uid]
    assert {p: [d["device"] for d in ds] for p, ds in record["prepared"].items()} == {
        "composite": [result["device"]],
        "cpu": ["cpu-numa-1"],
    }
    pod_uid = cp.api("GET", f"/api/v1/namespaces/{ns}/pods/job")["metadata"]["uid"]
    grace = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    cp.api("DELETE", f"/api/v1/namespaces/{ns}/pods/job", grace)
    unprepared = kubelet_standin.run("unprepare", *flags, f"--pod-uid={pod_uid}")
    assert unprepared.exit_code == 0, (unprepared.doc, unprepared.stderr[-3000:])
    assert uid not in node.dirs.checkpoint(DRIVER)
    _release(cp, ns, ["job"])


def test_a_junked_checkpoint_never_prepares_a_prepared_shares_cpus_again(
    control_plane: ControlPlane, node: Running, namespace: str
) -> None:
    """Issue 30, class 1, through the real node process: a share prepared, the node stopped,
    its checkpoint junked, the node restarted. Claims allocated by hand (stale allocations the
    scheduler's counters would not make) to the share's CPU group and to a sibling share are
    refused, naming the claim and the checkpoint; a claim on the other NUMA node is served;
    once the share is unprepared both are prepared."""
    cp, ns = control_plane, namespace
    name = f"ljunk-{uuid.uuid4().hex[:6]}"
    dirs = NodeDirs.create("dk-ljunk-")
    cp.create_node(name)

    def process(label: str) -> NodeProcess:
        return NodeProcess(
            kubeconfig=cp.kubeconfig,
            node_name=name,
            dirs=dirs,
            plugins=PLUGINS,
            profile=PROFILE,
            instance_id="ljunk",
            name=label,
        )

    def by_hand(claim: str, device: str, **result: Any) -> ClaimRef:
        made = allocated_claim(
            cp,
            ns,
            claim,
            [{"request": "r", "driver": DRIVER, "pool": name, "device": device, **result}],
            device_class=node.classes["cpu"],
        )
        return ClaimRef(namespace=ns, name=claim, uid=made["metadata"]["uid"])

    try:
        with process("first") as first:
            first.wait_ready(timeout=90)
            _wait_published(cp, name, 10, DRIVER)
            share = by_hand("share", "cpu-numa-0-share-0")
            with first.client(DRIVER) as client:
                assert client.prepare([share])[share.uid].error == ""
            assert first.terminate() == 0
        (dirs.state_dir / DRIVER / "checkpoint.json").write_text("{ junk")
        lone = by_hand(
            "lone", "cpu-numa-0", consumedCapacity={"cpu": "28"}, shareID=str(uuid.uuid4())
        )
        sibling = by_hand("sibling", "cpu-numa-0-share-1")
        elsewhere = by_hand("elsewhere", "cpu-numa-1-share-0")
        with process("restart") as proc:
            proc.wait_ready(timeout=90)
            with proc.client(DRIVER) as client:
                got = client.prepare([lone, sibling, elsewhere])
            assert f"device 'cpu-numa-0' is shared with claim with UID {share.uid}" in (
                got[lone.uid].error
            ), got[lone.uid].error
            assert "member devices cpu-numa-0 of plugin 'cpu' are held by claims" in (
                got[sibling.uid].error
            ), got[sibling.uid].error
            assert "checkpoint.json was lost" in got[sibling.uid].error
            for refused in (lone, sibling):
                assert not [n for n in dirs.cdi_specs() if refused.uid in n]
            assert got[elsewhere.uid].error == ""
            with proc.client(DRIVER) as client:
                assert client.unprepare([share])[share.uid].error == ""
                again = client.prepare([lone, sibling])
            assert all(again[r.uid].error == "" for r in (lone, sibling)), again
            with proc.client(DRIVER) as client:
                client.unprepare([lone, sibling, elsewhere])
            assert proc.terminate() == 0
        assert list(dirs.state_dir.joinpath(DRIVER).glob("checkpoint.json.corrupt-*"))
        for r in (share, lone, sibling, elsewhere):
            cp.api("DELETE", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{r.name}")
    finally:
        cp.delete_node(name)
        dirs.remove()
