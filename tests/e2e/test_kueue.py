"""Real Kueue (v0.17.0, ``hack/kueue/build.sh``) admitting drakit's devices by quota and placing
a job in one fabric domain with topology-aware scheduling.

Three ``drakit node`` processes (``amd_ainic`` on ``h200-8gpu-8ainic``: eight NICs each, 8 CPUs
per Node) serve the Nodes; the fabric domains are uneven: ``f1`` has one Node, ``f2`` two.
Kueue maps drakit's ``amd-ainic`` DeviceClass (``drakit deviceclasses``) to the logical resource
``drakit.io/ainic`` (``resources.deviceClassMappings``), a ClusterQueue holds a quota of it, and
Jobs claim NICs through ResourceClaimTemplates. Kueue admits by quota; the kube-scheduler then
allocates the NICs from drakit's ResourceSlices.

Without a kubelet, a Job "finishes" when the test writes its pods' phase ``Succeeded``; the
job controller completes the Job, and Kueue releases its quota.

The fabric label: each ``drakit node`` has its fabric in its configuration (``amd_ainic``'s
``fabric``) and writes ``topology.drakit.io/fabric`` on its own Node (``docs/multi-node.md``);
the test only adds the pool label that keeps Kueue's flavors to these Nodes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, wait_for
from tests.e2e.kueueproc import API, KUEUE_NAMESPACE_LABEL, KueueManager
from tests.e2e.nodeproc import RESOURCE, _drakit_argv, running_node

pytestmark = [pytest.mark.e2e, pytest.mark.kueue, pytest.mark.slow]

NIC_CLASS = "amd-ainic"  # drakit's DeviceClass for the amd_ainic backend
NIC_RESOURCE = "drakit.io/ainic"  # Kueue's logical resource for it
FABRIC_LABEL = "topology.drakit.io/fabric"
POOL_LABEL = "kueue.drakit.io/pool"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE = f"/apis/{API}"
PROFILE = "h200-8gpu-8ainic"
PLUGINS: dict[str, dict[str, Any]] = {"amd_ainic": {}}


# ---------------------------------------------------------------------------------- helpers
def patch(cp: ControlPlane, path: str, body: dict[str, Any], *, status: bool = False) -> None:
    code, data = cp._http(
        "PATCH",
        f"{cp.server}{path}{'/status' if status else ''}",
        body,
        content_type="application/merge-patch+json",
    )
    assert code == 200, f"PATCH {path}: {code} {data[:300]!r}"


def node_labels(cp: ControlPlane, node: str) -> dict[str, str]:
    return dict(cp.api("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels", {}))


def drakit_classes(run_dir: Path) -> list[dict[str, Any]]:
    """``drakit deviceclasses`` for this module's backends: the classes a user applies."""
    config = run_dir / "kueue-drakit.yaml"
    config.write_text(f"plugins: {json.dumps(PLUGINS)}\n")
    out = subprocess.run(
        [*_drakit_argv(), "deviceclasses", "--config", str(config), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return list(json.loads(out.stdout)["items"])


def job(
    name: str,
    queue: str,
    *,
    pods: int,
    template: str,
    cpu: str = "100m",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job of ``pods`` pods (all at once), each claiming from ``template``; Kueue's webhook
    suspends it until admission."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "nic", "resourceClaimTemplateName": template}],
                    "containers": [
                        {
                            "name": "c",
                            "image": "docker.io/drakit/test:1",
                            "resources": {"requests": {"cpu": cpu}, "claims": [{"name": "nic"}]},
                        }
                    ],
                },
            },
        },
    }


def nic_template(
    ns: str, name: str, device_class: str = NIC_CLASS, count: int = 1
) -> dict[str, Any]:
    """A ResourceClaimTemplate in the shape Kueue v0.17 accepts: ``exactly``, ExactCount, no
    selectors, constraints or config."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "nic",
                            "exactly": {
                                "deviceClassName": device_class,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            }
        },
    }


def workload_of(cp: ControlPlane, ns: str, job_name: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job (owned by it), if any yet."""
    for wl in cp.api("GET", f"{KUEUE}/namespaces/{ns}/workloads")["items"]:
        owners = wl["metadata"].get("ownerReferences", [])
        if any(o["kind"] == "Job" and o["name"] == job_name for o in owners):
            return dict(wl)
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return dict(c)
    return {}


def job_pods(cp: ControlPlane, ns: str, job_name: str) -> list[dict[str, Any]]:
    sel = f"batch.kubernetes.io/job-name={job_name}"
    return list(cp.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}")["items"])


def scheduled_with_nics(cp: ControlPlane, ns: str, job_name: str, pods: int) -> dict[str, str]:
    """Wait until the Job's ``pods`` pods are bound and each one's claim is allocated on its
    node by drakit's NIC driver; returns pod -> node."""

    def placed() -> dict[str, str] | None:
        items = job_pods(cp, ns, job_name)
        bound = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in items}
        if len(bound) != pods or not all(bound.values()):
            return None
        return {k: str(v) for k, v in bound.items()}

    where = wait_for(placed, timeout=90, interval=0.5, what=f"{pods} pods of Job {job_name} bound")
    for pod in job_pods(cp, ns, job_name):
        [status] = pod["status"]["resourceClaimStatuses"]
        claim = cp.api(
            "GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{status['resourceClaimName']}"
        )
        alloc = claim["status"]["allocation"]
        [result] = alloc["devices"]["results"]
        assert result["driver"] == "ainic.amd.drakit.io", result
        node = pod["spec"]["nodeName"]
        sel = f"spec.nodeName={node}"
        pools = {
            s["spec"]["pool"]["name"]
            for s in cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector={sel}")["items"]
        }
        assert result["pool"] in pools, (result, node, pools)
    return dict(where)


def finish(cp: ControlPlane, ns: str, job_name: str) -> None:
    """Play the kubelet: every pod of the Job ran to completion."""
    for pod in job_pods(cp, ns, job_name):
        name = pod["metadata"]["name"]
        patch(
            cp,
            f"/api/v1/namespaces/{ns}/pods/{name}",
            {
                "status": {
                    "phase": "Succeeded",
                    "conditions": [{"type": "Ready", "status": "False"}],
                }
            },
            status=True,
        )


def suspended(cp: ControlPlane, ns: str, job_name: str) -> bool:
    return bool(
        cp.api("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job_name}")["spec"].get("suspend")
    )


# --------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def pool() -> str:
    """The value of :data:`POOL_LABEL` on this module's Nodes (the ResourceFlavors' nodeLabels,
    so Kueue places nothing on another test's Nodes)."""
    return f"kq-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def nodes(control_plane: ControlPlane, pool: str) -> Iterator[dict[str, str]]:
    """Three drakit nodes: node -> fabric (``f1`` one Node, ``f2`` two)."""
    cp = control_plane
    settings = {"topology_labels": {"remove_on_exit": True}}

    def node(prefix: str, fabric: str) -> Any:
        plugins = {"amd_ainic": {**PLUGINS["amd_ainic"], "fabric": fabric}}
        return running_node(cp, prefix, plugins, profile=PROFILE, settings=settings)

    with node("kq-a", "f1") as a, node("kq-b", "f2") as b1, node("kq-c", "f2") as b2:
        fabrics = {a.name: "f1", b1.name: "f2", b2.name: "f2"}
        for name in fabrics:
            patch(cp, f"/api/v1/nodes/{name}", {"metadata": {"labels": {POOL_LABEL: pool}}})

        def labelled() -> bool:
            # written by each node driver from its NICs' fabric, not by this test
            return all(node_labels(cp, n).get(FABRIC_LABEL) == f for n, f in fabrics.items())

        wait_for(labelled, timeout=60, interval=0.5, what="the nodes' fabric labels")

        def published() -> bool:
            slices = cp.api("GET", f"{RESOURCE}/resourceslices")["items"]
            return {s["spec"].get("nodeName") for s in slices} >= set(fabrics)

        wait_for(published, timeout=60, interval=0.5, what="the nodes' ResourceSlices")
        yield fabrics


@pytest.fixture(scope="module")
def device_classes(control_plane: ControlPlane) -> Iterator[list[str]]:
    """drakit's DeviceClasses for the NIC backend, as ``drakit deviceclasses`` prints them."""
    cp = control_plane
    created: list[str] = []
    classes = drakit_classes(cp.run_dir)
    for dc in classes:
        name = dc["metadata"]["name"]
        code, data = cp._http("GET", f"{cp.server}{RESOURCE}/deviceclasses/{name}")
        if code == 200:
            existing = json.loads(data)
            if existing["spec"] != dc["spec"]:
                pytest.fail(f"DeviceClass {name} exists with another spec: {existing['spec']}")
            continue
        cp.api("POST", f"{RESOURCE}/deviceclasses", dc)
        created.append(name)
    try:
        yield [dc["metadata"]["name"] for dc in classes]
    finally:
        for name in created:
            cp.api("DELETE", f"{RESOURCE}/deviceclasses/{name}")


@pytest.fixture(scope="module")
def kueue(
    control_plane: ControlPlane, kueue_dir: Path, device_classes: list[str]
) -> Iterator[KueueManager]:
    """The Kueue manager, with drakit's NIC class mapped to :data:`NIC_RESOURCE`."""
    assert NIC_CLASS in device_classes
    manager = KueueManager(
        control_plane,
        kueue_dir,
        {NIC_RESOURCE: [NIC_CLASS]},
        run_dir=control_plane.logs_dir / f"kueue-{uuid.uuid4().hex[:6]}",
    )
    with manager:
        yield manager
    # stopped cleanly: no webhook of a stopped Kueue is left for the API server to call
    for kind in ("mutating", "validating"):
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations"
        left = [w["metadata"]["name"] for w in control_plane.api("GET", path)["items"]]
        assert not [n for n in left if n.startswith("kueue-")], left


@pytest.fixture
def kueue_ns(control_plane: ControlPlane, namespace: str) -> str:
    """The test's namespace, opted in to Kueue's webhooks."""
    patch(
        control_plane,
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"labels": {KUEUE_NAMESPACE_LABEL: "true"}}},
    )
    return namespace


@pytest.fixture
def queue(
    control_plane: ControlPlane, kueue: KueueManager, kueue_ns: str, pool: str
) -> Iterator[Any]:
    """Factory: ``queue(nics, topology=None)`` makes a ResourceFlavor (this module's Nodes), a
    ClusterQueue with ``nics`` of :data:`NIC_RESOURCE` and a LocalQueue in the test's namespace;
    returns the LocalQueue's name. Removed after the test."""
    cp = control_plane
    made: list[str] = []

    def flavor(name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": name},
            "spec": spec,
        }
        cp.api("POST", f"{KUEUE}/resourceflavors", body)
        made.append(f"{KUEUE}/resourceflavors/{name}")

    def make(nics: int, topology: list[str] | None = None) -> str:
        name = f"q-{uuid.uuid4().hex[:6]}"
        nodes_spec: dict[str, Any] = {"nodeLabels": {POOL_LABEL: pool}}
        nic_quota = {"name": NIC_RESOURCE, "nominalQuota": str(nics)}
        if not topology:
            # one flavor for the CPUs and the NICs
            flavor(name, nodes_spec)
            groups = [
                {
                    "coveredResources": ["cpu", NIC_RESOURCE],
                    "flavors": [
                        {
                            "name": name,
                            "resources": [{"name": "cpu", "nominalQuota": "64"}, nic_quota],
                        }
                    ],
                }
            ]
        else:
            body = {
                "apiVersion": API,
                "kind": "Topology",
                "metadata": {"name": name},
                "spec": {"levels": [{"nodeLabel": level} for level in topology]},
            }
            cp.api("POST", f"{KUEUE}/topologies", body)
            made.append(f"{KUEUE}/topologies/{name}")
            flavor(name, {**nodes_spec, "topologyName": name})
            # The NICs' quota sits in a flavor without a topology: Kueue v0.17 places pods by
            # their PodSpec (tas_flavorassigner.go:109, no DRA resource) but then checks the
            # placement with every resource of a TAS flavor (flavorassigner.go:95-101), and no
            # Node has "drakit.io/ainic" in its allocatable (tas_flavor_snapshot.go:410), so a
            # DRA resource in the TAS flavor never fits ("no longer fits after processing
            # another workload", scheduler.go:341). Quota-only flavors are skipped there.
            flavor(f"{name}-devices", {})
            groups = [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": name, "resources": [{"name": "cpu", "nominalQuota": "64"}]}
                    ],
                },
                {
                    "coveredResources": [NIC_RESOURCE],
                    "flavors": [{"name": f"{name}-devices", "resources": [nic_quota]}],
                },
            ]
        cq = {
            "apiVersion": API,
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": kueue_ns}},
                "resourceGroups": groups,
            },
        }
        cp.api("POST", f"{KUEUE}/clusterqueues", cq)
        made.append(f"{KUEUE}/clusterqueues/{name}")
        lq = {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": name},
            "spec": {"clusterQueue": name},
        }
        cp.api("POST", f"{KUEUE}/namespaces/{kueue_ns}/localqueues", lq)
        made.append(f"{KUEUE}/namespaces/{kueue_ns}/localqueues/{name}")

        def active() -> bool:
            return (
                condition(cp.api("GET", f"{KUEUE}/clusterqueues/{name}"), "Active").get("status")
                == "True"
            )

        wait_for(active, timeout=30, interval=0.3, what=f"ClusterQueue {name} active")
        return name

    try:
        yield make
    finally:
        for path in reversed(made):
            # a ClusterQueue keeps a finalizer while workloads use it; the namespace goes after
            # the test, so drop the finalizer rather than wait for that
            if "/clusterqueues/" in path:
                with contextlib.suppress(AssertionError):
                    patch(cp, path, {"metadata": {"finalizers": None}})
            with contextlib.suppress(ControlPlaneError):
                cp.api("DELETE", path)


# ------------------------------------------------------------------------------------ tests
def test_quota_holds_the_second_job_until_the_first_finishes(
    control_plane: ControlPlane, nodes: dict[str, str], kueue_ns: str, queue: Any
) -> None:
    """Two Jobs of two pods with one NIC each, a quota of two NICs: one admitted, the other
    held by quota for ``drakit.io/ainic`` and admitted when the first finishes."""
    cp, ns = control_plane, kueue_ns
    lq = queue(nics=2)
    cp.api("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", nic_template(ns, "nic"))
    cp.api("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("first", lq, pods=2, template="nic"))
    first = wait_for(
        lambda: (
            condition(workload_of(cp, ns, "first"), "Admitted").get("status") == "True"
            and workload_of(cp, ns, "first")
        ),
        timeout=60,
        interval=0.5,
        what="the first Job's Workload admitted",
    )
    [assignment] = first["status"]["admission"]["podSetAssignments"]
    assert assignment["resourceUsage"][NIC_RESOURCE] == "2", assignment
    placed = scheduled_with_nics(cp, ns, "first", 2)
    assert set(placed.values()) <= set(nodes)
    used = assignment["resourceUsage"][NIC_RESOURCE]
    print(f"first: admitted, {NIC_RESOURCE} used {used}; {placed}")

    cp.api(
        "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job("second", lq, pods=2, template="nic")
    )

    def held() -> dict[str, Any] | None:
        reserved = condition(workload_of(cp, ns, "second"), "QuotaReserved")
        return reserved if reserved.get("status") == "False" and reserved.get("message") else None

    reserved = wait_for(held, timeout=60, interval=0.5, what="the second Workload to be held")
    assert NIC_RESOURCE in reserved["message"], reserved
    print(f"second: QuotaReserved=False: {reserved['message']}")
    assert suspended(cp, ns, "second")
    assert job_pods(cp, ns, "second") == []

    finish(cp, ns, "first")
    wait_for(
        lambda: condition(workload_of(cp, ns, "second"), "Admitted").get("status") == "True",
        timeout=90,
        interval=0.5,
        what="the second Workload admitted after the first finished",
    )
    assert condition(workload_of(cp, ns, "first"), "Finished").get("status") == "True"
    assert not suspended(cp, ns, "second")
    print(f"second: admitted after the first finished; {scheduled_with_nics(cp, ns, 'second', 2)}")


def test_a_device_class_without_a_mapping_is_not_admitted(
    control_plane: ControlPlane, nodes: dict[str, str], kueue_ns: str, queue: Any
) -> None:
    """A claim on a DeviceClass Kueue has no mapping for is inadmissible, with Kueue's reason,
    and the Job stays suspended: quota cannot be bypassed through an unmapped class."""
    cp, ns = control_plane, kueue_ns
    lq = queue(nics=8)
    template = nic_template(ns, "other", device_class="amd-ainic-unmapped")
    cp.api("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    cp.api(
        "POST",
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        job("unmapped", lq, pods=1, template="other"),
    )

    def refused() -> dict[str, Any] | None:
        reserved = condition(workload_of(cp, ns, "unmapped"), "QuotaReserved")
        return reserved if reserved.get("reason") == "Inadmissible" else None

    reserved = wait_for(refused, timeout=60, interval=0.5, what="the Workload refused")
    assert "DeviceClass amd-ainic-unmapped is not mapped" in reserved["message"], reserved
    assert suspended(cp, ns, "unmapped")
    print(f"unmapped: {reserved['reason']}: {reserved['message']}")


def test_topology_aware_scheduling_keeps_a_job_in_one_fabric(
    control_plane: ControlPlane, nodes: dict[str, str], kueue_ns: str, queue: Any
) -> None:
    """Kueue TAS with the fabric label as a topology level: a Job of two pods that each take
    most of a Node's CPUs and one NIC, required in one fabric, goes to ``f2`` (two Nodes), the
    only domain with room for both, and the scheduler gives each pod a NIC on its Node."""
    cp, ns = control_plane, kueue_ns
    lq = queue(nics=8, topology=[FABRIC_LABEL, "kubernetes.io/hostname"])
    cp.api("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", nic_template(ns, "nic"))
    body = job(
        "spread",
        lq,
        pods=2,
        template="nic",
        cpu="5",
        annotations={REQUIRED_TOPOLOGY: FABRIC_LABEL},
    )
    cp.api("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)
    admitted = wait_for(
        lambda: (
            condition(workload_of(cp, ns, "spread"), "Admitted").get("status") == "True"
            and workload_of(cp, ns, "spread")
        ),
        timeout=60,
        interval=0.5,
        what="the TAS Workload admitted",
    )
    [assignment] = admitted["status"]["admission"]["podSetAssignments"]
    assert assignment.get("topologyAssignment"), assignment
    placed = scheduled_with_nics(cp, ns, "spread", 2)
    fabrics = {nodes[node] for node in placed.values()}
    assert fabrics == {"f2"}, (placed, nodes)
    assert len(set(placed.values())) == 2, placed
    print(f"spread: {json.dumps({pod: (node, nodes[node]) for pod, node in placed.items()})}")
    # Kueue's topology ungater, not the scheduler's choice, pinned each pod to its Node
    for pod in job_pods(cp, ns, "spread"):
        selector = pod["spec"].get("nodeSelector", {})
        assert selector.get("kubernetes.io/hostname") == pod["spec"]["nodeName"], selector
        assert selector.get(POOL_LABEL), selector
