"""The Helm chart installed into the real control plane, and the least privilege it grants.

helm renders ``deployments/helm/drakit`` (the GPU-NIC pairing set plus the CPU backend), kubectl
server-side applies every object, and the API server's verdict is the test: each object is
accepted and reads back as rendered. Then, with service-account tokens from the TokenRequest
API, every call the chart should allow is made and succeeds, and every call it should not allow
is made and refused:

* the node driver, with a token bound to its pod on node A (so it carries the node-name claim),
  creates, updates and deletes node A's ResourceSlices; node B's slices, cluster-wide slices,
  slices of a driver the release does not enable, and anything without a pod-bound token are
  refused by the chart's ValidatingAdmissionPolicy, and everything outside its ClusterRole by
  RBAC;
* the webhook's identity may create, get and delete ResourceClaimTemplates, create Events and
  read DeviceClasses, and nothing else.

No kubelet or workload controllers run, so the DaemonSet and the webhook Deployment stay
without pods; the node driver's pod is created from the DaemonSet's own template (as the
DaemonSet controller would) so that its token can be bound to it. The webhook configurations
are applied with ``failurePolicy: Ignore`` and an ``objectSelector`` that no other object of the
session carries, so the webhook that never runs here cannot block other requests of this or any
other test; they are deleted first at teardown.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, wait_for
from tests.e2e.nodeproc import NodeDirs, NodeProcess
from tests.helmchart import CHART, Helm, HelmError, by_kind, helm_binary, one

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

RESOURCE = "/apis/resource.k8s.io/v1"
# the composite's members publish under its driver (docs/composite.md)
ENABLED = {
    "cpu": "cpu.drakit.io",
    "nvidia_gpu": "pairs.composite.drakit.io",
    "amd_ainic": "pairs.composite.drakit.io",
    "composite": "pairs.composite.drakit.io",
}
NOT_ENABLED_DRIVER = "gpu.amd.drakit.io"
POLICY_NODE = "may only write ResourceSlices with spec.nodeName"
POLICY_DRIVER = "may only write ResourceSlices of its drivers"
POLICY_TOKEN = "must use a service-account token bound to its pod"
POLICY_LABEL_NODE = "may only change the labels of Node"
POLICY_LABEL_KEY = "may only change Node labels under topology.drakit.io/"

#: Where each rendered kind lives in the API (path prefix, namespaced).
API_PATHS = {
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "DeviceClass": (RESOURCE, "deviceclasses", False),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}
#: Cluster-scoped kinds, in the order teardown deletes them (webhooks first).
CLUSTER_TEARDOWN = (
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingAdmissionPolicy",
    "ClusterRoleBinding",
    "ClusterRole",
    "DeviceClass",
)


def object_path(obj: Mapping[str, Any]) -> str:
    prefix, plural, namespaced = API_PATHS[obj["kind"]]
    meta = obj["metadata"]
    if namespaced:
        return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
    return f"{prefix}/{plural}/{meta['name']}"


@dataclass
class Caller:
    """Calls the API server with one bearer token; returns (status, decoded body)."""

    cp: ControlPlane
    token: str

    def __call__(
        self, method: str, path: str, body: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            )
        req = urllib.request.Request(  # noqa: S310 - the test control plane's https URL
            self.cp.server + path, data=data, headers=headers, method=method
        )
        ctx = ssl.create_default_context(cafile=str(self.cp.ca_file))
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:  # noqa: S310
                raw = resp.read()
                return int(resp.status), json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            with exc:
                raw = exc.read()
                return int(exc.code), json.loads(raw) if raw else {}


@dataclass
class Release:
    """The applied chart: its objects and the names the tests need."""

    cp: ControlPlane
    name: str
    namespace: str
    objects: list[dict[str, Any]]
    node_a: str
    node_b: str

    @property
    def node_sa(self) -> str:
        return f"{self.name}-drakit-node"

    @property
    def webhook_sa(self) -> str:
        return f"{self.name}-drakit-webhook"

    def token(self, sa: str, bound_pod: Mapping[str, Any] | None = None) -> str:
        """A TokenRequest token for ``sa``, bound to ``bound_pod`` when given."""
        spec: dict[str, Any] = {"expirationSeconds": 3600}
        if bound_pod is not None:
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": bound_pod["metadata"]["name"],
                "uid": bound_pod["metadata"]["uid"],
            }
        reply = self.cp.api(
            "POST",
            f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{sa}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        token: str = reply["status"]["token"]
        return token


def slice_body(name: str, driver: str, **where: Any) -> dict[str, Any]:
    """A ResourceSlice with one device; ``where`` is nodeName=..., allNodes=True, ..."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": f"pool-{name}", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "dev-0"}],
            **where,
        },
    }


def refused(reply: tuple[int, dict[str, Any]], message: str) -> bool:
    status, body = reply
    return status == 403 and message in body.get("message", "")


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    try:
        binary = helm_binary()
    except HelmError as exc:
        pytest.fail(f"helm unavailable: {exc}", pytrace=False)
    return Helm(binary, tmp_path_factory.mktemp("chart"))


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, helm: Helm) -> Iterator[Release]:
    suffix = uuid.uuid4().hex[:6]
    name, namespace = f"chart-{suffix}", f"drakit-chart-{suffix}"
    values = {
        "backends": {n: {"enabled": True} for n in ENABLED},
        "webhook": {
            "failurePolicy": "Ignore",
            "timeoutSeconds": 2,
            # a letter first: a hex suffix like 387e36 or 123456 is a number to Helm's YAML
            "objectSelector": {"matchLabels": {"drakit-e2e-chart-webhook": f"s-{suffix}"}},
        },
    }
    objects = helm.template(values, release=name, namespace=namespace)
    rendered = helm.work_dir / f"{name}.yaml"
    rendered.write_text(yaml.safe_dump_all(objects))
    kubectl = control_plane.binary("kubectl")
    if not kubectl.exists():
        pytest.fail(f"{kubectl} missing; hack/control-plane/build.sh builds it", pytrace=False)
    node_a, node_b = f"chart-a-{suffix}", f"chart-b-{suffix}"
    control_plane.create_node(node_a)
    control_plane.create_node(node_b)
    control_plane.api(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {
                    "drakit-e2e": "true",
                    "pod-security.kubernetes.io/enforce": "privileged",
                },
            },
        },
    )
    try:
        applied = subprocess.run(
            [
                str(kubectl),
                f"--kubeconfig={control_plane.kubeconfig}",
                "apply",
                "--server-side",
                "--field-manager=drakit-e2e-chart",
                f"--filename={rendered}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert applied.returncode == 0, applied.stderr
        yield Release(control_plane, name, namespace, objects, node_a, node_b)
    finally:
        for kind in CLUSTER_TEARDOWN:
            for obj in by_kind(objects, kind):
                with contextlib.suppress(ControlPlaneError):
                    control_plane.api("DELETE", object_path(obj))
        with contextlib.suppress(ControlPlaneError):
            control_plane.api(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
        with contextlib.suppress(ControlPlaneError):
            control_plane.api("DELETE", f"/api/v1/namespaces/{namespace}")
        control_plane.delete_node(node_a)
        control_plane.delete_node(node_b)


@pytest.fixture(scope="module")
def driver_pod(release: Release) -> dict[str, Any]:
    """The node driver's pod on node A, made from the DaemonSet's template."""
    template = one(release.objects, "DaemonSet")["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{release.name}-node-a",
            "namespace": release.namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": release.node_a},
    }
    created: dict[str, Any] = release.cp.api(
        "POST", f"/api/v1/namespaces/{release.namespace}/pods", pod
    )
    return created


@pytest.fixture(scope="module")
def node_driver(release: Release, driver_pod: dict[str, Any]) -> Caller:
    """The node driver on node A, once RBAC and the admission policy are in force."""
    call = Caller(release.cp, release.token(release.node_sa, driver_pod))
    own = slice_body("probe-a", ENABLED["cpu"], nodeName=release.node_a)
    other = slice_body("probe-b", ENABLED["cpu"], nodeName=release.node_b)
    # Dry runs pass through authorization and admission without storing anything.
    wait_for(
        lambda: (
            call("POST", f"{RESOURCE}/resourceslices?dryRun=All", own)[0] == 201
            and refused(call("POST", f"{RESOURCE}/resourceslices?dryRun=All", other), POLICY_NODE)
        ),
        timeout=60,
        what="the node driver's RBAC and admission policy to take effect",
    )
    return call


# ------------------------------------------------------------------------------ installed


def test_every_rendered_object_is_stored_as_rendered(release: Release) -> None:
    kinds = {o["kind"] for o in release.objects}
    assert kinds == set(API_PATHS)
    for obj in release.objects:
        stored = release.cp.api("GET", object_path(obj))
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"], obj["kind"]
        if obj["kind"] == "ConfigMap":
            assert stored["data"] == obj["data"]
        if obj["kind"] == "DeviceClass":
            assert stored["spec"] == obj["spec"]


def test_daemonset_accepted_with_its_privileges(release: Release) -> None:
    rendered = one(release.objects, "DaemonSet")
    stored = release.cp.api("GET", object_path(rendered))
    pod = stored["spec"]["template"]["spec"]
    assert stored["spec"]["updateStrategy"]["rollingUpdate"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["serviceAccountName"] == release.node_sa
    container = pod["containers"][0]
    # The release enables the NVIDIA backend, whose NVML needs a privileged container, and the
    # AINIC backend, which sets VFs on the host's netdevs and creates them through /sys.
    assert container["securityContext"]["privileged"] is True
    assert pod["hostNetwork"] is True
    read_only = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert read_only["/sys"] is False
    assert read_only["/etc/drakit"] is True
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_pod_from_the_daemonset_template_is_admitted(
    release: Release, driver_pod: dict[str, Any]
) -> None:
    # The Priority admission plugin resolved the class, as it will for the DaemonSet's pods.
    assert driver_pod["spec"]["priority"] == 2000001000
    assert driver_pod["spec"]["nodeName"] == release.node_a


def test_webhook_objects_accepted(release: Release) -> None:
    mutating = release.cp.api(
        "GET", object_path(one(release.objects, "MutatingWebhookConfiguration"))
    )["webhooks"][0]
    validating = release.cp.api(
        "GET", object_path(one(release.objects, "ValidatingWebhookConfiguration"))
    )["webhooks"][0]
    service = f"{release.name}-drakit-webhook"
    assert mutating["clientConfig"]["service"] == {
        "name": service,
        "namespace": release.namespace,
        "path": "/mutate-pods",
        "port": 443,
    }
    assert validating["clientConfig"]["service"]["path"] == "/validate-claims"
    assert mutating["matchConditions"][0]["name"] == "asks-for-gpu-nic-pairs"
    secret = release.cp.api("GET", f"/api/v1/namespaces/{release.namespace}/secrets/{service}-tls")
    assert mutating["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    deployment = release.cp.api("GET", object_path(one(release.objects, "Deployment")))["spec"][
        "template"
    ]["spec"]
    assert deployment["serviceAccountName"] == release.webhook_sa
    assert deployment["securityContext"]["runAsNonRoot"] is True


# ------------------------------------------------------------------------ the node driver


def test_node_token_names_node_a(release: Release, node_driver: Caller) -> None:
    status, review = node_driver(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert status == 201
    user = review["status"]["userInfo"]
    assert user["username"] == f"system:serviceaccount:{release.namespace}:{release.node_sa}"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [release.node_a]


def test_node_driver_writes_its_own_nodes_slices(release: Release, node_driver: Caller) -> None:
    for plugin, driver in ENABLED.items():
        name = f"{release.node_a}-{plugin.replace('_', '-')}"
        body = slice_body(name, driver, nodeName=release.node_a)
        status, created = node_driver("POST", f"{RESOURCE}/resourceslices", body)
        assert status == 201, created
        created["spec"]["devices"].append({"name": "dev-1"})
        status, updated = node_driver("PUT", f"{RESOURCE}/resourceslices/{name}", created)
        assert status == 200, updated
        assert [d["name"] for d in updated["spec"]["devices"]] == ["dev-0", "dev-1"]
        status, listed = node_driver(
            "GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={release.node_a}"
        )
        assert status == 200
        assert name in [s["metadata"]["name"] for s in listed["items"]]
        status, deleted = node_driver("DELETE", f"{RESOURCE}/resourceslices/{name}")
        assert status == 200, deleted


def test_node_driver_cannot_create_other_slices(release: Release, node_driver: Caller) -> None:
    cpu = ENABLED["cpu"]
    node_b = slice_body(f"{release.node_b}-x", cpu, nodeName=release.node_b)
    assert refused(node_driver("POST", f"{RESOURCE}/resourceslices", node_b), POLICY_NODE)
    cluster_wide = slice_body(f"{release.name}-all", cpu, allNodes=True)
    assert refused(node_driver("POST", f"{RESOURCE}/resourceslices", cluster_wide), POLICY_NODE)
    selected = slice_body(
        f"{release.name}-sel",
        cpu,
        nodeSelector={
            "nodeSelectorTerms": [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [release.node_a]}
                    ]
                }
            ]
        },
    )
    assert refused(node_driver("POST", f"{RESOURCE}/resourceslices", selected), POLICY_NODE)
    foreign = slice_body(f"{release.node_a}-amd", NOT_ENABLED_DRIVER, nodeName=release.node_a)
    assert refused(node_driver("POST", f"{RESOURCE}/resourceslices", foreign), POLICY_DRIVER)
    # Nothing of the above was stored.
    stored = {
        s["metadata"]["name"] for s in release.cp.api("GET", f"{RESOURCE}/resourceslices")["items"]
    }
    assert not stored & {b["metadata"]["name"] for b in (node_b, cluster_wide, selected, foreign)}


@pytest.mark.parametrize(
    ("where", "driver", "message"),
    [
        pytest.param("b", ENABLED["cpu"], POLICY_NODE, id="node-b"),
        pytest.param("all", ENABLED["cpu"], POLICY_NODE, id="cluster-wide"),
        pytest.param("a", NOT_ENABLED_DRIVER, POLICY_DRIVER, id="other-driver"),
    ],
)
def test_node_driver_cannot_update_or_delete_other_slices(
    release: Release, node_driver: Caller, where: str, driver: str, message: str
) -> None:
    placements: dict[str, dict[str, Any]] = {
        "a": {"nodeName": release.node_a},
        "b": {"nodeName": release.node_b},
        "all": {"allNodes": True},
    }
    placement = placements[where]
    name = f"{release.name}-admin-{where}-{uuid.uuid4().hex[:4]}"
    stored = release.cp.api(
        "POST", f"{RESOURCE}/resourceslices", slice_body(name, driver, **placement)
    )
    try:
        stored["spec"]["devices"].append({"name": "dev-1"})
        assert refused(node_driver("PUT", f"{RESOURCE}/resourceslices/{name}", stored), message)
        assert refused(node_driver("DELETE", f"{RESOURCE}/resourceslices/{name}"), message)
        after = release.cp.api("GET", f"{RESOURCE}/resourceslices/{name}")
        assert [d["name"] for d in after["spec"]["devices"]] == ["dev-0"]
    finally:
        release.cp.api("DELETE", f"{RESOURCE}/resourceslices/{name}")


def test_token_without_a_pod_cannot_write_slices(release: Release, node_driver: Caller) -> None:
    unbound = Caller(release.cp, release.token(release.node_sa))
    body = slice_body(f"{release.node_a}-unbound", ENABLED["cpu"], nodeName=release.node_a)
    assert refused(unbound("POST", f"{RESOURCE}/resourceslices", body), POLICY_TOKEN)


@pytest.mark.parametrize(
    ("method", "path_fmt", "body"),
    [
        pytest.param("PATCH", "{r}/resourceslices/x", {"metadata": {}}, id="patch-slices"),
        pytest.param("DELETE", "{r}/resourceslices", None, id="deletecollection-slices"),
        pytest.param("GET", "{r}/resourceclaims", None, id="list-claims"),
        pytest.param("GET", "/api/v1/namespaces/{ns}/secrets", None, id="list-secrets"),
        pytest.param("GET", "/api/v1/pods", None, id="list-pods"),
        pytest.param(
            "PATCH", "/api/v1/nodes/{node}/status", {"metadata": {}}, id="patch-node-status"
        ),
        pytest.param("PUT", "/api/v1/nodes/{node}", {"metadata": {}}, id="update-node"),
        pytest.param("DELETE", "/api/v1/nodes/{node}", None, id="delete-node"),
        pytest.param(
            "POST",
            "{r}/deviceclasses",
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"}},
            id="create-deviceclass",
        ),
    ],
)
def test_node_driver_rbac_refuses(
    release: Release,
    node_driver: Caller,
    method: str,
    path_fmt: str,
    body: dict[str, Any] | None,
) -> None:
    path = path_fmt.format(r=RESOURCE, ns=release.namespace, node=release.node_a)
    status, reply = node_driver(method, path, body)
    assert status == 403, reply
    assert reply["reason"] == "Forbidden"
    assert release.node_sa in reply["message"]


def node_labels(release: Release, node: str) -> dict[str, str]:
    labels: dict[str, str] = release.cp.api("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
    return labels


def test_node_driver_keeps_only_its_own_nodes_topology_labels(
    release: Release, node_driver: Caller
) -> None:
    """The label policy: its own Node, only ``topology.drakit.io/`` labels, nothing else."""
    own, other = f"/api/v1/nodes/{release.node_a}", f"/api/v1/nodes/{release.node_b}"

    def labels(values: dict[str, str | None]) -> dict[str, Any]:
        return {"metadata": {"labels": values}}

    wait_for(  # a dry run passes authorization and admission and stores nothing
        lambda: refused(
            node_driver("PATCH", f"{other}?dryRun=All", labels({"topology.drakit.io/x": "1"})),
            POLICY_LABEL_NODE,
        ),
        timeout=60,
        what="the node-labels admission policy to take effect",
    )
    status, reply = node_driver("PATCH", own, labels({"topology.drakit.io/fabric": "f1"}))
    assert status == 200, reply
    assert node_labels(release, release.node_a)["topology.drakit.io/fabric"] == "f1"
    status, reply = node_driver("PATCH", own, labels({"topology.drakit.io/fabric": None}))
    assert status == 200, reply
    assert "topology.drakit.io/fabric" not in node_labels(release, release.node_a)
    # another node's labels, another prefix, removing a label it does not own
    assert refused(
        node_driver("PATCH", other, labels({"topology.drakit.io/fabric": "f1"})), POLICY_LABEL_NODE
    )
    assert refused(node_driver("PATCH", own, labels({"team": "x"})), POLICY_LABEL_KEY)
    assert refused(
        node_driver("PATCH", own, labels({"kubernetes.io/hostname": None})), POLICY_LABEL_KEY
    )
    # the rest of the Node: spec (cordon, taints) and annotations
    assert refused(node_driver("PATCH", own, {"spec": {"unschedulable": True}}), POLICY_LABEL_KEY)
    assert refused(
        node_driver("PATCH", own, {"metadata": {"annotations": {"a": "b"}}}), POLICY_LABEL_KEY
    )
    # a token bound to no pod names no node
    unbound = Caller(release.cp, release.token(release.node_sa))
    assert refused(unbound("PATCH", own, labels({"topology.drakit.io/fabric": "f1"})), POLICY_TOKEN)
    after = release.cp.api("GET", own)
    assert "team" not in after["metadata"]["labels"]
    assert not after["spec"].get("unschedulable")
    assert "topology.drakit.io/fabric" not in node_labels(release, release.node_b)


def test_node_driver_may_read_its_node_and_record_events(
    release: Release, node_driver: Caller
) -> None:
    status, _ = node_driver("GET", f"/api/v1/nodes/{release.node_a}")
    assert status == 200
    status, _ = node_driver(
        "POST",
        f"/api/v1/namespaces/{release.namespace}/events",
        event(release, "node-a"),
    )
    assert status == 201


def test_drakit_node_runs_with_the_charts_identity(
    release: Release, driver_pod: dict[str, Any], node_driver: Caller
) -> None:
    """``drakit node`` on node A, whose kubeconfig holds only the node-bound token, becomes
    ready (its slices published): the ClusterRole and the policy grant all it does."""
    token_config = json.loads(release.cp.kubeconfig.read_text())
    token_config["users"][0]["user"] = {"token": node_driver.token}
    dirs = NodeDirs.create("dk-chart-")
    kubeconfig = dirs.root / "node-a.kubeconfig"
    kubeconfig.write_text(json.dumps(token_config))
    kubeconfig.chmod(0o600)
    plugins = yaml.safe_load(one(release.objects, "ConfigMap")["data"]["drakit.yaml"])["plugins"]
    plugins["amd_ainic"]["fabric"] = "chart-fabric"  # so it labels its Node (multi-node.md)
    proc = NodeProcess(
        kubeconfig=kubeconfig,
        node_name=release.node_a,
        dirs=dirs,
        plugins=plugins,
        profile="h200-8gpu-8ainic",
        instance_id=driver_pod["metadata"]["uid"],
    )
    try:
        with proc:
            proc.wait_ready(timeout=120)
            published = release.cp.api(
                "GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={release.node_a}"
            )["items"]
            assert {s["spec"]["driver"] for s in published} == set(ENABLED.values())
            assert all(s["spec"]["nodeName"] == release.node_a for s in published)
            # the label policy lets it keep its own Node's topology labels
            wait_for(
                lambda: (
                    node_labels(release, release.node_a).get("topology.drakit.io/fabric")
                    == "chart-fabric"
                ),
                timeout=60,
                what="drakit node to label its Node with the chart's identity",
            )
    finally:
        dirs.remove()
        release.cp.api(
            "DELETE", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={release.node_a}"
        )


# ------------------------------------------------------------------------------ the webhook


def event(release: Release, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:6]}", "namespace": release.namespace},
        "involvedObject": {"kind": "Pod", "namespace": release.namespace, "name": "p"},
        "reason": "Test",
        "message": "chart e2e",
        "type": "Normal",
    }


@pytest.fixture(scope="module")
def webhook(release: Release) -> Caller:
    call = Caller(release.cp, release.token(release.webhook_sa))
    wait_for(
        lambda: call("GET", f"{RESOURCE}/deviceclasses")[0] == 200,
        timeout=60,
        what="the webhook's RBAC to take effect",
    )
    return call


def test_webhook_manages_claim_templates(release: Release, webhook: Caller) -> None:
    templates = f"{RESOURCE}/namespaces/{release.namespace}/resourceclaimtemplates"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "pairs"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "p", "exactly": {"deviceClassName": "gpu-nic-pair"}}]
                }
            }
        },
    }
    status, created = webhook("POST", templates, body)
    assert status == 201, created
    status, _ = webhook("GET", f"{templates}/pairs")
    assert status == 200
    status, _ = webhook("PUT", f"{templates}/pairs", created)  # an owner added
    assert status == 200
    status, _ = webhook("GET", "/api/v1/pods?labelSelector=webhook.drakit.io%2Fmutated%3Dtrue")
    assert status == 200  # the template controller's list (and watch)
    for method, path, payload in (
        ("GET", templates, None),
        ("GET", f"{RESOURCE}/resourceclaimtemplates", None),
    ):
        status, reply = webhook(method, path, payload)
        assert status == 403, (method, path, reply)
    status, _ = webhook("DELETE", f"{templates}/pairs")
    assert status == 200


def test_webhook_reads_device_classes_and_records_events(release: Release, webhook: Caller) -> None:
    status, classes = webhook("GET", f"{RESOURCE}/deviceclasses")
    assert status == 200
    assert {"cpu", "nvidia-gpu", "amd-ainic", "gpu-nic-pair"} <= {
        c["metadata"]["name"] for c in classes["items"]
    }
    status, _ = webhook("GET", f"{RESOURCE}/deviceclasses/gpu-nic-pair")
    assert status == 200
    status, _ = webhook(
        "POST", f"/api/v1/namespaces/{release.namespace}/events", event(release, "webhook")
    )
    assert status == 201


@pytest.mark.parametrize(
    ("method", "path_fmt", "body"),
    [
        pytest.param("GET", "/api/v1/namespaces/{ns}/secrets", None, id="list-secrets"),
        pytest.param("DELETE", "/api/v1/namespaces/{ns}/pods/x", None, id="delete-pod"),
        pytest.param("POST", "/api/v1/namespaces/{ns}/pods", {"metadata": {}}, id="create-pod"),
        pytest.param("GET", "{r}/resourceslices", None, id="list-slices"),
        pytest.param("POST", "{r}/resourceslices", {"metadata": {}}, id="create-slice"),
        pytest.param("GET", "{r}/namespaces/{ns}/resourceclaims", None, id="list-claims"),
        pytest.param(
            "POST", "{r}/namespaces/{ns}/resourceclaims", {"metadata": {}}, id="create-claim"
        ),
        pytest.param("DELETE", "{r}/deviceclasses/cpu", None, id="delete-deviceclass"),
        pytest.param("POST", "{r}/deviceclasses", {"metadata": {}}, id="create-deviceclass"),
        pytest.param("GET", "/api/v1/nodes", None, id="list-nodes"),
    ],
)
def test_webhook_rbac_refuses(
    release: Release, webhook: Caller, method: str, path_fmt: str, body: dict[str, Any] | None
) -> None:
    status, reply = webhook(method, path_fmt.format(r=RESOURCE, ns=release.namespace), body)
    assert status == 403, reply
    assert release.webhook_sa in reply["message"]


# ------------------------------------------------------------------- helm install, upgrade


def test_helm_install_upgrade_keeps_the_webhook_certificate(
    control_plane: ControlPlane, helm: Helm
) -> None:
    """helm itself installs the chart; an upgrade reuses the CA (``lookup``) and rolls the pods."""
    suffix = uuid.uuid4().hex[:6]
    name, namespace = f"helm-{suffix}", f"drakit-helm-{suffix}"
    values = helm.values_file(
        {
            # Class names of their own, so that this release and the applied one coexist.
            "backends": {"cpu": {"deviceClass": {"name": f"cpu-{suffix}"}}},
            "webhook": {
                "failurePolicy": "Ignore",
                "timeoutSeconds": 2,
                "objectSelector": {"matchLabels": {"drakit-e2e-chart-webhook": f"s-{suffix}"}},
            },
        },
        f"{name}.yaml",
    )
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace]
    secret_path = f"/api/v1/namespaces/{namespace}/secrets/{name}-drakit-webhook-tls"
    webhook_path = (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/" + f"{name}-drakit"
    )
    ds_path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}-drakit-node"
    try:
        helm.run("install", name, str(CHART), *kube, "--create-namespace", "--values", str(values))
        first = control_plane.api("GET", secret_path)["data"]["ca.crt"]
        checksum = control_plane.api("GET", ds_path)["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]
        helm.run(
            "upgrade", name, str(CHART), *kube, "--reuse-values", "--set", "config.log_level=DEBUG"
        )
        assert control_plane.api("GET", secret_path)["data"]["ca.crt"] == first
        webhook = control_plane.api("GET", webhook_path)["webhooks"][0]
        assert webhook["clientConfig"]["caBundle"] == first
        config = control_plane.api(
            "GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}-drakit-config"
        )["data"]["drakit.yaml"]
        assert yaml.safe_load(config)["log_level"] == "DEBUG"
        annotations = control_plane.api("GET", ds_path)["spec"]["template"]["metadata"][
            "annotations"
        ]
        assert annotations["checksum/config"] != checksum
        helm.run("uninstall", name, *kube)
        for path in (webhook_path, f"{RESOURCE}/deviceclasses/cpu-{suffix}", ds_path):
            with pytest.raises(ControlPlaneError, match="HTTP 404"):
                control_plane.api("GET", path)
    finally:
        helm.run("uninstall", name, *kube, "--ignore-not-found", check=False)
        with contextlib.suppress(ControlPlaneError):
            control_plane.api("DELETE", f"/api/v1/namespaces/{namespace}")
