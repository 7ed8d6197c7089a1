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
* the webhook creates nothing (``sideEffects: None``): its template controller makes the
  template a pod names, in the pod's namespace, owned by the pods using it, and the garbage
  collector deletes it with the last one; the claim goes with its pod;
* the API server authenticates to the webhook with the client certificate its
  AdmissionConfiguration gives it (the session control plane's); other callers get 401;
* called directly, whatever the review says, the webhook creates, changes and deletes nothing;
  through the API server, a user who may create pods in one namespace changes nothing in another;
* dry runs create nothing; Kueue-labelled pods get ``exactly`` requests only.
"""

from __future__ import annotations

import http.client
import json
import ssl
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import WEBHOOK_CLIENT_NAME, ControlPlane, ControlPlaneError, wait_for
from tests.e2e.nodeproc import drakit_device_classes
from tests.e2e.webhookproc import WebhookProcess, make_certificates, webhook_configurations

from drakit.admission import CREATED_BY, CREATED_LABEL, PODS_LABEL
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
            extra_args=(
                f"--client-ca={control_plane.webhook_client_ca}",
                f"--client-name={WEBHOOK_CLIENT_NAME}",
            ),
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

    # the claim is the pod's; the template was made by drakit's controller, owned by the pod
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "p", pod["metadata"]["uid"])
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{template}"
    made = control_plane.api("GET", path)["metadata"]
    assert made["labels"][CREATED_LABEL] == CREATED_BY
    assert [(o["kind"], o["uid"]) for o in made["ownerReferences"]] == [
        ("Pod", pod["metadata"]["uid"])
    ]
    control_plane.api(
        "DELETE",
        f"/api/v1/namespaces/{namespace}/pods/p",
        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
    )
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    templates = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates"
    wait_for(
        lambda: (
            not control_plane.api("GET", claims)["items"]
            and not control_plane.api("GET", templates)["items"]
        ),
        timeout=60,
        what="the claim and the template garbage-collected with their pod",
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


def webhook_events(cp: ControlPlane, namespace: str = "") -> list[tuple[str, str, str]]:
    """(namespace, involved object, reason) of every Event drakit's webhook process recorded."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return sorted(
        (e["metadata"]["namespace"], e["involvedObject"].get("name", ""), e["reason"])
        for e in cp.api("GET", f"/api/v1{where}/events")["items"]
        if (e.get("source") or {}).get("component") == "drakit-webhook"
    )


def snapshot(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """Every template, claim and pod (uid -> resourceVersion) and webhook Event in ``namespace``."""
    where = f"/namespaces/{namespace}"
    out: dict[str, Any] = {"events": webhook_events(cp, namespace)}
    for kind, path in (
        ("templates", f"{RESOURCE}{where}/resourceclaimtemplates"),
        ("claims", f"{RESOURCE}{where}/resourceclaims"),
        ("pods", f"/api/v1{where}/pods"),
    ):
        items = cp.api("GET", path)["items"]
        out[kind] = {
            (i["metadata"]["namespace"], i["metadata"]["name"]): (
                i["metadata"]["uid"],
                i["metadata"]["resourceVersion"] if kind != "pods" else "",
            )
            for i in items
        }
    return out


def made_template(cp: ControlPlane, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """The template the pod's claim entry names, once the controller has made it for the pod."""
    name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{name}"

    def owned() -> dict[str, Any] | None:
        try:
            t = cp.api("GET", path)
        except ControlPlaneError:
            return None
        uids = {o["uid"] for o in t["metadata"].get("ownerReferences") or []}
        return t if pod["metadata"]["uid"] in uids else None

    made: dict[str, Any] = wait_for(owned, timeout=30, what=f"template {name} owned by its pod")
    return made


def foreign_template(cp: ControlPlane, namespace: str, name: str) -> None:
    spec: dict[str, Any] = {"spec": {"devices": {"requests": []}}}
    cp.api(
        "POST",
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def direct_review(kind: str, namespace: str, obj: dict[str, Any], **request: Any) -> bytes:
    group = "" if kind == "Pod" else "resource.k8s.io"
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uuid.uuid4().hex,
                "kind": {"group": group, "version": "v1", "kind": kind},
                "operation": "CREATE",
                "namespace": namespace,
                "name": obj["metadata"].get("name", ""),
                "object": obj,
                "dryRun": False,
                **request,
            },
        }
    ).encode()


def post(webhook: WebhookProcess, ctx: ssl.SSLContext, path: str, body: bytes) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=ctx, timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return int(resp.status)
    finally:
        conn.close()


def test_the_webhook_called_directly_changes_nothing_whatever_the_review_says(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    """Issue 30, class 2: no review, from the API server's own identity or none, creates,
    changes, deletes or records anything, in any namespace."""
    cp = control_plane
    victim = create_pair_pod(cp, namespace, "victim", "nowhere", 2, "required")
    template = made_template(cp, namespace, victim)
    foreign_template(cp, namespace, "theirs")
    wait_for(
        lambda: (
            ("victim", "NUMAAlignmentRequired")
            in {(n, r) for _, n, r in webhook_events(cp, namespace)}
        ),
        timeout=30,
        what="the victim pod's event",
    )
    spaces = (namespace, "kube-system", "default")  # (other tests' namespaces are going away)
    before = [snapshot(cp, ns) for ns in spaces]

    pairs = {PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "required"}
    victim_ref = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "victim",
        "uid": victim["metadata"]["uid"],
    }
    names = (template["metadata"]["name"], "theirs")
    reviews: list[tuple[str, bytes]] = []
    for ns in spaces:
        reviews.append(("/mutate-pods", direct_review("Pod", ns, pod_body("x", "n", pairs))))
        hand_made = pod_body("y", "n", pairs, labels={PODS_LABEL: "true"})
        hand_made["spec"]["resourceClaims"] = [
            {"name": "gpu-nic-pairs", "resourceClaimTemplateName": n} for n in names[:1]
        ]
        reviews.append(("/mutate-pods", direct_review("Pod", ns, hand_made)))
        for name in names:
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"bait-{name}",
                    "annotations": {TEMPLATE_ANNOTATION: name, **pairs},
                    "ownerReferences": [victim_ref],
                },
                "spec": {"devices": {"requests": []}},
            }
            reviews.append(("/validate-claims", direct_review("ResourceClaim", ns, claim)))
            for operation in ("UPDATE", "DELETE"):
                reviews.append(
                    (
                        "/validate-claims",
                        direct_review("ResourceClaim", ns, claim, operation=operation),
                    )
                )
    anonymous = webhook.certs.context()
    assert {post(webhook, anonymous, path, body) for path, body in reviews} == {401}
    apiserver = webhook.certs.context()  # the API server's own client certificate
    pki = cp.webhook_client_ca.parent
    apiserver.load_cert_chain(pki / "webhook-client.crt", pki / "webhook-client.key")
    assert {post(webhook, apiserver, path, body) for path, body in reviews} == {200}

    # the webhook before issue 30 deleted a template named by a claim 5 s after admitting the
    # claim: give a delayed action that long to show (an absence has no condition to wait for)
    time.sleep(6)
    assert [snapshot(cp, ns) for ns in spaces] == before


def token_for(cp: ControlPlane, namespace: str, sa: str) -> str:
    cp.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}},
    )
    reply = cp.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    return str(reply["status"]["token"])


def as_user(cp: ControlPlane, token: str, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(  # noqa: S310 - the test control plane's https URL
        cp.server + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method=method,
    )
    ctx = ssl.create_default_context(cafile=str(cp.ca_file))
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:  # noqa: S310
            return int(resp.status), json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), json.loads(exc.read() or b"{}")


def test_a_user_of_one_namespace_cannot_affect_another_through_the_webhook(
    control_plane: ControlPlane, namespace: str, webhook: WebhookProcess
) -> None:
    """Issue 30, class 2, through the API server: a user who may create pods, claims and
    templates in one namespace changes nothing in another, and in their own gets only
    templates their pods' claim entries name, labelled and owned by their pods."""
    cp = control_plane
    victim = create_pair_pod(cp, namespace, "victim", "nowhere", 2, "none")
    ours = made_template(cp, namespace, victim)
    foreign_template(cp, namespace, "theirs")
    before = snapshot(cp, namespace)

    attacker = f"e2e-{uuid.uuid4().hex[:8]}"
    cp.create_namespace(attacker, {"drakit-e2e": "true"})
    try:
        token = token_for(cp, attacker, "mallory")
        cp.api(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{attacker}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "user"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]},
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "resources": ["resourceclaims", "resourceclaimtemplates"],
                        "verbs": ["create", "get", "list", "update"],
                    },
                ],
            },
        )
        cp.api(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{attacker}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "user"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "user",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "mallory", "namespace": attacker}],
            },
        )
        pods = f"/api/v1/namespaces/{attacker}/pods"
        tpls = f"{RESOURCE}/namespaces/{attacker}/resourceclaimtemplates"
        pairs = {PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "none"}
        # the victim's template's name is public knowledge (it says what it holds); and a
        # claim that names the victim's templates and pod in its annotations and owners
        status, _ = as_user(
            cp,
            token,
            "POST",
            f"{RESOURCE}/namespaces/{attacker}/resourceclaims",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": "bait",
                    "annotations": {TEMPLATE_ANNOTATION: ours["metadata"]["name"], **pairs},
                },
                "spec": {"devices": {"requests": []}},
            },
        )
        assert status == 201
        # a pod labelled as the webhook's, naming a template it did not ask for
        hand = pod_body("hand", "nowhere", {"team": "x"}, labels={PODS_LABEL: "true"})
        hand["spec"]["resourceClaims"] = [
            {"name": "gpu-nic-pairs", "resourceClaimTemplateName": "theirs"}
        ]
        assert as_user(cp, token, "POST", pods, hand)[0] == 201
        # a template of the deterministic name made first by the user (drakit leaves it)
        status, dry = as_user(cp, token, "POST", f"{pods}?dryRun=All", pod_body("d", "n", pairs))
        assert status == 201
        squatted = dry["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        spec: dict[str, Any] = {"spec": {"devices": {"requests": []}}}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": squatted},
            "spec": spec,
        }
        assert as_user(cp, token, "POST", tpls, body)[0] == 201
        status, squat_pod = as_user(cp, token, "POST", pods, pod_body("squat", "n", pairs))
        assert status == 201
        wait_for(
            lambda: (
                ("squat", "ClaimTemplateNotMadeByDrakit")
                in {(n, r) for _, n, r in webhook_events(cp, attacker)}
            ),
            timeout=30,
            what="the event naming the template drakit did not make",
        )
        # the user's own pair pod, last: once its template is made, the controller has seen
        # every pod before it
        status, own = as_user(
            cp, token, "POST", pods, pod_body("own", "n", {**pairs, PAIRS_ANNOTATION: "3"})
        )
        assert status == 201
        made = made_template(cp, attacker, own)

        assert snapshot(cp, namespace) == before, "another namespace's objects changed"
        templates = {t["metadata"]["name"]: t for t in cp.api("GET", tpls)["items"]}
        assert set(templates) == {squatted, made["metadata"]["name"]}
        assert CREATED_LABEL not in (templates[squatted]["metadata"].get("labels") or {})
        assert not templates[squatted]["metadata"].get("ownerReferences")
        owners = [o["uid"] for o in made["metadata"]["ownerReferences"]]
        assert owners == [own["metadata"]["uid"]]
        assert squat_pod["metadata"]["uid"] not in owners
        events = webhook_events(cp, attacker)
        assert {(n, r) for _, n, r in events} == {("squat", "ClaimTemplateNotMadeByDrakit")}
        assert webhook_events(cp, namespace) == before["events"]
    finally:
        cp.delete_namespace(attacker)
