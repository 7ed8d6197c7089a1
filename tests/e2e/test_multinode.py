"""A distributed job's NICs in one fabric domain, across nodes, with the real kube-scheduler.

Three ``drakit node`` processes (AINIC backend only) on two simulated profiles, registered as
three Nodes, each publishing four of its eight NICs: two on rail 0 and two on rail 1, so a pod
that asks for one NIC per rail fits twice on a node. Two fabric domains with uneven room:
``fabric-a`` is one node (2 pods), ``fabric-b`` two nodes (4 pods). ``fabric-a`` and the
first ``fabric-b`` node take their fabric from configuration; the second ``fabric-b`` node
from the ``ainic.drakit.io/fabric`` label a fabric manager writes. Each node labels itself
``topology.drakit.io/fabric`` and ``topology.drakit.io/rails`` (``docs/multi-node.md``).

A job is a PodGroup (gang, ``minCount`` = its pods) whose topology constraint is the key
``topology.drakit.io/fabric``, and pods whose claims come from one ResourceClaimTemplate:
two NICs with distinct rails in one fabric; no rail or fabric value appears in it. Then:

1. job 1 (3 pods) fits only in ``fabric-b``: all its pods land there, each with one NIC on
   rail 0 and one on rail 1;
2. job 2 (3 pods): ``fabric-a`` has room for 2, ``fabric-b`` for 1, so no domain can hold it
   although the cluster has room for 3: it waits whole, no pod is bound, and
   ``drakit explain job`` says why per domain;
3. job 1 ends: job 2 lands whole in ``fabric-b``; no pod stays unbound.

It fails when the labels are broken (no label: step 1 never places; one value everywhere:
step 2 places across domains) or when the domain selection is (no topology constraint:
step 2 places across domains). The gates it needs (``GenericWorkload``,
``TopologyAwareWorkloadScheduling``) are on in the shared control plane (``controlplane.py``).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import DRIVERS, RESOURCE, NodeDirs, NodeProcess, create_device_class

pytestmark = pytest.mark.e2e

NIC = DRIVERS["amd_ainic"]
FABRIC = "topology.drakit.io/fabric"
RAILS = "topology.drakit.io/rails"
SCHEDULING = "/apis/scheduling.k8s.io/v1beta1"

#: Per profile: the four NICs published, on rails 0, 0, 1, 1 (the rest: mode none). First fit
#: alone would give a pod two NICs of rail 0: only the claim's distinctAttribute spreads them.
NICS = {
    "h200-8gpu-8ainic": ("enp24s0", "enp64s0", "enp79s0", "enp94s0"),
    "mi300x-8gpu-8ainic": ("enp9s0", "enp35s0", "enp83s0", "enp105s0"),
}


@dataclass(frozen=True)
class Cluster:
    """The three nodes: name -> fabric, and what selects them."""

    fabric_of: dict[str, str]
    selector: dict[str, str]
    procs: dict[str, NodeProcess]


def ainic(profile: str, fabric: str | None) -> dict[str, Any]:
    nics = NICS[profile]
    section: dict[str, Any] = {
        "default_mode": "none",
        "nics": [{"select": {"pf_names": list(nics)}, "mode": "pf"}],
        "rails": {name: i // 2 for i, name in enumerate(nics)},
    }
    if fabric is not None:
        section["fabric"] = fabric
    return section


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Cluster]:
    cp = control_plane
    suffix = uuid.uuid4().hex[:6]
    selector = {"drakit-e2e-multinode": suffix}
    # (name, profile, fabric in the configuration, labels the Node is created with)
    layout = [
        (f"mn-a1-{suffix}", "h200-8gpu-8ainic", "fabric-a", {}),
        (f"mn-b1-{suffix}", "mi300x-8gpu-8ainic", "fabric-b", {}),
        (f"mn-b2-{suffix}", "h200-8gpu-8ainic", None, {"ainic.drakit.io/fabric": "fabric-b"}),
    ]
    procs: dict[str, NodeProcess] = {}
    dirs: list[NodeDirs] = []
    try:
        for name, profile, fabric, labels in layout:
            cp.create_node(name, labels={**selector, **labels})
            d = NodeDirs.create(f"dk-{name[:5]}-")
            dirs.append(d)
            procs[name] = NodeProcess(
                kubeconfig=cp.kubeconfig,
                node_name=name,
                dirs=d,
                plugins={"amd_ainic": ainic(profile, fabric)},
                profile=profile,
                settings={
                    "discovery": {"interval": 1},
                    "topology_labels": {"remove_on_exit": True},
                },
                instance_id=name,
            ).start(wait=False)
        for proc in procs.values():
            proc.wait_ready(timeout=120)
        yield Cluster(
            {name: "fabric-a" if "-a1-" in name else "fabric-b" for name in procs},
            selector,
            procs,
        )
    finally:
        for proc in procs.values():
            proc.close()
        for name in procs:
            cp.delete_node(name)
        for d in dirs:
            d.remove()


def node_labels(cp: ControlPlane, node: str) -> dict[str, str]:
    labels: dict[str, str] = cp.api("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
    return labels


# ------------------------------------------------------------------------------ the job


def create_job(
    cp: ControlPlane,
    namespace: str,
    name: str,
    pods: int,
    *,
    template: str,
    selector: Mapping[str, str],
) -> list[str]:
    """A PodGroup of ``pods`` (gang, one fabric domain) and its pods; the pods' names."""
    cp.api(
        "POST",
        f"{SCHEDULING}/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": pods}},
                "schedulingConstraints": {"topology": [{"key": FABRIC}]},
            },
        },
    )
    names = [f"{name}-{i}" for i in range(pods)]
    for pod in names:
        cp.api(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod, "labels": {"job": name}},
                "spec": {
                    "schedulingGroup": {"podGroupName": name},
                    "nodeSelector": dict(selector),
                    "containers": [
                        {
                            "name": "rank",
                            "image": "x.invalid/rccl-test",
                            "resources": {"claims": [{"name": "nics"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "nics", "resourceClaimTemplateName": template}],
                },
            },
        )
    return names


def one_nic_per_rail(device_class: str, rails: int) -> dict[str, Any]:
    """``rails`` NICs, each on another rail, all in one fabric: no rail or fabric value."""
    return {
        "requests": [{"name": "nic", "exactly": {"deviceClassName": device_class, "count": rails}}],
        "constraints": [
            {"requests": ["nic"], "distinctAttribute": f"{NIC}/rail"},
            {"requests": ["nic"], "matchAttribute": f"{NIC}/fabric"},
        ],
    }


def placement(cp: ControlPlane, namespace: str, pod: str) -> tuple[str, list[int]] | None:
    """``(node, rails of its NICs)`` once the pod is bound with its claim allocated."""
    got = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    node = got["spec"].get("nodeName")
    statuses = got.get("status", {}).get("resourceClaimStatuses") or []
    if not node or not statuses or not statuses[0].get("resourceClaimName"):
        return None
    claim = cp.api(
        "GET",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{statuses[0]['resourceClaimName']}",
    )
    results = (
        ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
    )
    if not results:
        return None
    rails = sorted(rail_of(cp, node, r["device"]) for r in results)
    return node, rails


def rail_of(cp: ControlPlane, node: str, device: str) -> int:
    slices = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
    for s in slices["items"]:
        for d in s["spec"].get("devices", []):
            if s["spec"]["driver"] == NIC and d["name"] == device:
                return int(d["attributes"]["rail"]["int"])
    raise AssertionError(f"{node}: no published device {device}")


def placements(
    cp: ControlPlane, namespace: str, pods: list[str], timeout: float, what: str
) -> dict[str, tuple[str, list[int]]]:
    def all_placed() -> dict[str, tuple[str, list[int]]] | None:
        got = {p: placement(cp, namespace, p) for p in pods}
        placed = {p: v for p, v in got.items() if v is not None}
        return placed if len(placed) == len(pods) else None

    done: dict[str, tuple[str, list[int]]] = wait_for(all_placed, timeout=timeout, what=what)
    return done


def unschedulable(cp: ControlPlane, namespace: str, pod: str) -> bool:
    got = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    conds = got.get("status", {}).get("conditions") or []
    return any(
        c["type"] == "PodScheduled"
        and c["status"] == "False"
        and c.get("reason") == "Unschedulable"
        for c in conds
    )


def show(cluster: Cluster, job: str, placed: Mapping[str, tuple[str, list[int]]]) -> None:
    """The placement as the docs quote it (``pytest -s`` shows it)."""
    for pod, (node, rails) in sorted(placed.items()):
        print(f"{job}: {pod} -> {node} ({cluster.fabric_of[node]}) rails {rails}")


def explain_job(
    cp: ControlPlane, namespace: str, template: str, pods: int, *, text: bool = False
) -> dict[str, Any]:
    """``drakit explain job`` against the cluster, as JSON (``text``: ``{"text": output}``)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from drakit.commands.cli import main; main()",
            "explain",
            "job",
            f"{namespace}/{template}",
            "--pods",
            str(pods),
            "--topology-key",
            FABRIC,
            "--kubeconfig",
            str(cp.kubeconfig),
            "-o",
            "text" if text else "json",
            "--exit-zero",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = {"text": out.stdout} if text else json.loads(out.stdout)
    return doc


# ------------------------------------------------------------------------------ the tests


def test_each_node_labels_its_fabric_and_rails(
    control_plane: ControlPlane, cluster: Cluster
) -> None:
    wait_labelled(control_plane, cluster)


def wait_labelled(cp: ControlPlane, cluster: Cluster) -> None:
    """Every node carries its fabric and two rails (the node processes wrote them)."""

    def labelled(node: str, fabric: str) -> bool:
        labels = node_labels(cp, node)
        return labels.get(FABRIC) == fabric and labels.get(RAILS) == "2"

    for node, fabric in cluster.fabric_of.items():
        wait_for(
            functools.partial(labelled, node, fabric),
            timeout=60,
            what=f"{node} labelled {FABRIC}={fabric}, {RAILS}=2",
        )


def test_a_job_lands_in_one_domain_waits_whole_and_starts_when_one_has_room(
    control_plane: ControlPlane, cluster: Cluster, namespace: str
) -> None:
    cp = control_plane
    wait_labelled(cp, cluster)
    device_class = f"mn-nic-{uuid.uuid4().hex[:6]}"
    create_device_class(cp, device_class, NIC)
    try:
        cp.api(
            "POST",
            f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-nic-per-rail"},
                "spec": {"spec": {"devices": one_nic_per_rail(device_class, 2)}},
            },
        )
        job = {"template": "one-nic-per-rail", "selector": cluster.selector}

        # 1. only fabric-b has room for three pods
        why = explain_job(cp, namespace, "one-nic-per-rail", 3)
        assert [d["domain"] for d in why["domains"] if d["fits"]] == ["fabric-b"], why
        assert {d["domain"]: d["pods"] for d in why["domains"]} == {"fabric-a": 2, "fabric-b": 3}
        job1 = create_job(cp, namespace, "job1", 3, **job)  # type: ignore[arg-type]
        placed1 = placements(cp, namespace, job1, 120, "job1's pods bound and allocated")
        show(cluster, "job1", placed1)
        assert {cluster.fabric_of[n] for n, _ in placed1.values()} == {"fabric-b"}, placed1
        assert all(rails == [0, 1] for _, rails in placed1.values()), placed1

        # 2. fabric-a has room for 2, fabric-b for 1: the job waits whole
        why = explain_job(cp, namespace, "one-nic-per-rail", 3)
        print(explain_job(cp, namespace, "one-nic-per-rail", 3, text=True)["text"])
        holds = {d["domain"]: d["pods"] for d in why["domains"]}
        assert holds == {"fabric-a": 2, "fabric-b": 1}, why
        assert not any(d["fits"] for d in why["domains"]), why
        job2 = create_job(cp, namespace, "job2", 3, **job)  # type: ignore[arg-type]
        wait_for(
            lambda: all(unschedulable(cp, namespace, p) for p in job2),
            timeout=120,
            what="the scheduler to find no domain for job2",
        )
        bound = {p: placement(cp, namespace, p) for p in job2}
        assert not any(bound.values()), f"job2 placed in part: {bound}"
        print(
            "job2: waits whole;",
            "; ".join(f"{d['domain']} holds {d['pods']} of 3" for d in why["domains"]),
        )

        # 3. job1 ends: fabric-b has room for four, job2 lands there whole
        cp.api(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods?labelSelector=job%3Djob1",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
        )
        placed2 = placements(cp, namespace, job2, 300, "job2's pods bound once job1 ended")
        show(cluster, "job2", placed2)
        assert {cluster.fabric_of[n] for n, _ in placed2.values()} == {"fabric-b"}, placed2
        assert all(rails == [0, 1] for _, rails in placed2.values()), placed2
    finally:
        cp.api("DELETE", f"{RESOURCE}/deviceclasses/{device_class}")


def test_labels_follow_the_fabric_manager_and_go_on_exit(
    control_plane: ControlPlane, cluster: Cluster
) -> None:
    cp = control_plane
    b2 = next(n for n in cluster.procs if "-b2-" in n)
    cp._http(
        "PATCH",
        f"{cp.server}/api/v1/nodes/{b2}",
        {"metadata": {"labels": {"ainic.drakit.io/fabric": "fabric-c"}}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: node_labels(cp, b2).get(FABRIC) == "fabric-c",
        timeout=60,
        what=f"{b2} moved to fabric-c",
    )
    cp._http(
        "PATCH",
        f"{cp.server}/api/v1/nodes/{b2}",
        {"metadata": {"labels": {"ainic.drakit.io/fabric": None}}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: FABRIC not in node_labels(cp, b2),
        timeout=60,
        what=f"{FABRIC} removed from {b2} when no NIC has a fabric",
    )
    assert node_labels(cp, b2).get(RAILS) == "2"  # its rails are still there
    # a label under the prefix that drakit did not compute is not drakit's to keep
    cp._http(
        "PATCH",
        f"{cp.server}/api/v1/nodes/{b2}",
        {"metadata": {"labels": {"topology.drakit.io/stale": "x", "team": "rdma"}}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: "topology.drakit.io/stale" not in node_labels(cp, b2),
        timeout=60,
        what="the stray topology.drakit.io/ label removed",
    )
    assert node_labels(cp, b2)["team"] == "rdma"  # never touches another label
    # remove_on_exit: a stopped node takes its labels with it
    a1 = next(n for n in cluster.procs if "-a1-" in n)
    cluster.procs[a1].terminate()
    labels = node_labels(cp, a1)
    assert FABRIC not in labels, labels
    assert RAILS not in labels, labels
    assert cluster.selector.items() <= labels.items()  # what others wrote stays
