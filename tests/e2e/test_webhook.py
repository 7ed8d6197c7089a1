"""``drakit webhook`` called by the real kube-apiserver over TLS, with the real scheduler.

One webhook process (the real CLI, a certificate from a CA made here, registered through
Mutating/ValidatingWebhookConfigurations with that CA as ``caBundle``) serves the module.
Fake nodes publish what ``h200-8gpu-8ainic`` publishes (8 GPU-NIC pairs, 4 per NUMA node);
the DeviceClasses are ``drakit deviceclasses``'s output. Pods carry only the pair annotations;
the webhook adds the template and claims, the resourceclaim controller makes the claim and the
scheduler allocates it (or does not):

* room on one NUMA node: ``preferred`` puts all 4 pairs there (its first choice);
* a node fragmented so that no NUMA node has 4 free pairs but the node has 4: ``preferred``
  schedules (falls back), ``none`` schedules, ``required`` stays Pending with an Event why;
* bad annotations and bad CpuConfigs are refused at create time, naming the field;
* templates are deleted once their claim exists; the claim goes with its pod;
* dry runs create nothing; Kueue-labelled pods get ``exactly`` requests only.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, ControlPlaneError, wait_for
from tests.e2e.nodeproc import drakit_device_classes
from tests.e2e.webhookproc import WebhookProcess, make_certificates, webhook_configurations

from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import default_sections, fast_tmp, open_host
from drakit_composite.admission import PAIRS_ANNOTATION, POLICY_ANNOTATION, TEMPLATE_ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROFILE = "h200-8gpu-8ainic"
RESOURCE = "/apis/resource.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PLUGINS = ["cpu", "nvidia_gpu", "amd_ainic", "composite"]
NUMA = "resource.kubernetes.io/numaNode"


@pytest.fixture(scope="module")
def webhook(control_plane: ControlPlane) -> Iterator[WebhookProcess]:
    with tempfile.TemporaryDirectory(prefix="dk-webhook-", dir=fast_tmp()) as tmp:
        certs = make_certificates(Path(tmp) / "tls")
        proc = WebhookProcess(
            certs,
            control_plane.kubeconfig,
            Path(tmp),
            config={"plugins": default_sections(PLUGINS)},
        )
        name = f"drakit-e2e-{uuid.uuid4().hex[:6]}"
        mutating, validating = webhook_configurations(
            name, proc.url, certs.ca_bundle, {"drakit-e2e": "true"}
        )
        with proc:
            control_plane.api("POST", f"{ADMISSION}/mutatingwebhookconfigurations", mutating)
            control_plane.api("POST", f"{ADMISSION}/validatingwebhookconfigurations", validating)
            try:
                yield proc
            finally:
                control_plane.api("DELETE", f"{ADMISSION}/mutatingwebhookconfigurations/{name}")
                control_plane.api("DELETE", f"{ADMISSION}/validatingwebhookconfigurations/{name}")


@pytest.fixture(scope="module")
def classes(control_plane: ControlPlane, webhook: WebhookProcess) -> Iterator[list[str]]:
    """``drakit deviceclasses -o json`` for the default backends, applied."""
    with drakit_device_classes(control_plane) as items:
        yield [o["metadata"]["name"] for o in items]


def h200_node(control_plane: ControlPlane, fake_node: Callable[..., dict[str, Any]]) -> str:
    """A fake node publishing the h200 profile's slices; its name."""
    node = str(fake_node()["metadata"]["name"])
    settings = DrakitSettings(profile=PROFILE, node_name=node, plugins=default_sections(PLUGINS))
    with open_host(settings) as host:
        for obj in build_inventory(host).slices():
            control_plane.api("POST", f"{RESOURCE}/resourceslices", obj)
    return node


def pair_numa(control_plane: ControlPlane, node: str) -> dict[str, int]:
    """Pair device name -> its NUMA node, as published for ``node``."""
    slices = control_plane.api(
        "GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}"
    )["items"]
    return {
        d["name"]: d["attributes"][NUMA]["int"]
        for s in slices
        if s["spec"]["driver"] == "pairs.composite.drakit.io"
        for d in s["spec"].get("devices") or []
        if d["name"].startswith("pair-")  # the GPUs and NICs share the pairs' driver
    }


def pod_body(
    name: str, node: str, annotations: dict[str, str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations, "labels": labels or {}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "train", "image": "registry.invalid/noop"}],
        },
    }


def create_pair_pod(
    cp: ControlPlane, namespace: str, name: str, node: str, pairs: int, policy: str, **kw: Any
) -> dict[str, Any]:
    annotations = {PAIRS_ANNOTATION: str(pairs), POLICY_ANNOTATION: policy}
    return cp.api(
        "POST", f"/api/v1/namespaces/{namespace}/pods", pod_body(name, node, annotations, **kw)
    )


def pod_claim(cp: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    """The claim the resourceclaim controller made for the pod's ``gpu-nic-pairs`` entry."""

    def made() -> str | None:
        status = cp.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}").get("status") or {}
        for s in status.get("resourceClaimStatuses") or []:
            if s.get("name") == "gpu-nic-pairs" and s.get("resourceClaimName"):
                return str(s["resourceClaimName"])
        return None

    claim = wait_for(made, timeout=60, what=f"the claim of pod {pod}")
    return cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}")


def allocation(cp: ControlPlane, namespace: str, claim: str) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        c = cp.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}")
        alloc = (c.get("status") or {}).get("allocation")
        return alloc["devices"]["results"] if alloc else None

    results: list[dict[str, Any]] = wait_for(done, timeout=60, what=f"claim {claim} allocated")
    return results


def fragment(cp: ControlPlane, namespace: str, node: str) -> None:
    """Hold 2 pairs on each NUMA node, so no NUMA node has 4 free but the node has 4."""
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "blocker"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": f"n{k}",
                            "exactly": {"deviceClassName": f"gpu-nic-pair-numa{k}", "count": 2},
                        }
                        for k in (0, 1)
                    ]
                }
            },
        },
    )
    body = pod_body("blocker", node, {})
    body["spec"]["resourceClaims"] = [{"name": "b", "resourceClaimName": "blocker"}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "b"}]}
    cp.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    assert len(allocation(cp, namespace, "blocker")) == 4


def test_webhook_serves_tls_to_the_api_server(webhook: WebhookProcess) -> None:
    assert webhook.healthz() == 200


def test_preferred_puts_all_pairs_on_one_numa_node_when_there_is_room(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    classes: list[str],
) -> None:
    node = h200_node(control_plane, fake_node)
    pod = create_pair_pod(control_plane, namespace, "p", node, 4, "preferred")
    template = pod["metadata"]["annotations"][TEMPLATE_ANNOTATION]
    assert pod["spec"]["resourceClaims"] == [
        {"name": "gpu-nic-pairs", "resourceClaimTemplateName": template}
    ]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-nic-pairs"}]
    claim = pod_claim(control_plane, namespace, "p")
    results = allocation(control_plane, namespace, claim["metadata"]["name"])
    numa = pair_numa(control_plane, node)
    assert {r["request"] for r in results} == {"pairs/aligned"}
    assert len({numa[r["device"]] for r in results}) == 1
    assert len(results) == 4

    # the claim is the pod's (garbage-collected with it); the single-use template is gone
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "p", pod["metadata"]["uid"])
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{template}"

    def template_gone() -> bool:
        try:
            control_plane.api("GET", path)
        except ControlPlaneError as e:
            return "404" in str(e)
        return False

    wait_for(template_gone, timeout=30, what=f"template {template} deleted")
    control_plane.api(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/p",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    wait_for(
        lambda: not control_plane.api("GET", claims)["items"],
        timeout=60,
        what="the claim garbage-collected with its pod",
    )


@pytest.mark.parametrize("policy", ["preferred", "none", "required"])
def test_fragmented_node(
    control_plane: ControlPlane,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    classes: list[str],
    policy: str,
) -> None:
    node = h200_node(control_plane, fake_node)
    fragment(control_plane, namespace, node)
    create_pair_pod(control_plane, namespace, "p", node, 4, policy)
    claim = pod_claim(control_plane, namespace, "p")["metadata"]["name"]
    if policy != "required":
        results = allocation(control_plane, namespace, claim)
        numa = pair_numa(control_plane, node)
        assert len(results) == 4
        assert sorted(numa[r["device"]] for r in results) == [0, 0, 1, 1]
        if policy == "preferred":  # neither one NUMA node nor one socket had room
            assert {r["request"] for r in results} == {"pairs/any"}
        return

    def unschedulable() -> bool:
        status = control_plane.api("GET", f"/api/v1/namespaces/{namespace}/pods/p")["status"]
        return any(
            c["type"] == "PodScheduled"
            and c["status"] == "False"
            and c.get("reason") == "Unschedulable"
            for c in status.get("conditions") or []
        )

    wait_for(unschedulable, timeout=60, what="the scheduler to give up on the required pod")
    c = control_plane.api("GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim}")
    assert not (c.get("status") or {}).get("allocation")
    events = control_plane.api(
        "GET",
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=p,"
        "reason=NUMAAlignmentRequired",
    )["items"]
    [event] = events
    assert event["involvedObject"]["kind"] == "Pod"
    assert "stays Pending until a node has 4 free pairs on a single NUMA node" in event["message"]
    assert "numa-policy=preferred" in event["message"]


def test_bad_annotation_is_refused_naming_it(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    body = pod_body("bad", "nowhere", {PAIRS_ANNOTATION: "lots"})
    with pytest.raises(ControlPlaneError) as info:
        control_plane.api("POST", f"/api/v1/namespaces/{namespace}/pods", body)
    assert "HTTP 400" in str(info.value)
    assert f"metadata.annotations[{PAIRS_ANNOTATION}]" in str(info.value)


def test_bad_cpu_config_is_refused_at_create_naming_the_field(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    def claim(policy: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"cpus-{policy}"},
            "spec": {
                "devices": {
                    "requests": [{"name": "cpus", "exactly": {"deviceClassName": "cpu"}}],
                    "config": [
                        {
                            "requests": ["cpus"],
                            "opaque": {
                                "driver": "cpu.drakit.io",
                                "parameters": {
                                    "apiVersion": "cpu.drakit.io/v1alpha1",
                                    "kind": "CpuConfig",
                                    "policy": policy,
                                },
                            },
                        }
                    ],
                }
            },
        }

    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    with pytest.raises(ControlPlaneError) as info:
        control_plane.api("POST", path, claim("tightest"))
    assert "spec.devices.config[0].opaque.parameters.policy" in str(info.value)
    control_plane.api("POST", path, claim("packed"))  # a good one is admitted


def test_dry_run_creates_no_template(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    body = pod_body("dry", "nowhere", {PAIRS_ANNOTATION: "2"})
    pod = control_plane.api("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", body)
    assert pod["spec"]["resourceClaims"][0]["name"] == "gpu-nic-pairs"
    templates = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates"
    assert control_plane.api("GET", templates)["items"] == []


def test_kueue_pods_get_exactly_requests_only(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    create_pair_pod(
        control_plane,
        namespace,
        "queued",
        "nowhere",
        4,
        "preferred",
        labels={"kueue.x-k8s.io/queue-name": "gpu"},
    )
    claim = pod_claim(control_plane, namespace, "queued")
    devices = claim["spec"]["devices"]
    [request] = devices["requests"]
    assert "firstAvailable" not in request
    assert (request["exactly"]["deviceClassName"], request["exactly"]["count"]) == (
        "gpu-nic-pair",
        4,
    )
    assert "constraints" not in devices


def test_a_claims_annotation_cannot_have_a_template_drakit_did_not_make_deleted(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    """Issue 30, class 2: the template GC deletes only templates the webhook created."""
    cp = control_plane
    templates = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates"
    spec: dict[str, Any] = {"spec": {"devices": {"requests": []}}}
    theirs = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate"}
    cp.api("POST", templates, {**theirs, "metadata": {"name": "theirs"}, "spec": spec})
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "bait", "annotations": {TEMPLATE_ANNOTATION: "theirs"}},
        "spec": {"devices": {"requests": []}},
    }
    cp.api("POST", f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim)
    # the webhook's GC runs 5 s after the claim is admitted; a pair pod's template, made by the
    # webhook, goes in the same time (so the wait below is long enough to have seen a delete)
    create_pair_pod(cp, namespace, "owned", "nowhere", 1, "none")
    ours = pod_claim(cp, namespace, "owned")
    name = ours["metadata"]["annotations"][TEMPLATE_ANNOTATION]

    def gone() -> bool:
        return name not in {t["metadata"]["name"] for t in cp.api("GET", templates)["items"]}

    wait_for(gone, timeout=30, what="the webhook's own template to be collected")
    left = {t["metadata"]["name"] for t in cp.api("GET", templates)["items"]}
    assert "theirs" in left, "a template drakit did not make was deleted on a claim's word"
    assert f"not deleting ResourceClaimTemplate {namespace}/theirs" in webhook.log()
