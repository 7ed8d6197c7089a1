"""The composite backend's GPU-NIC pair pods (``drakit_composite.admission``), without a cluster.

The plugin host is real (the installed cpu and composite backends and the shipped
strategies); what needs the API server (the template controller making templates and events)
is covered by ``tests/e2e/test_webhook.py``; plans here make no API call, nor could they.
The engine's checks of opaque configs and of the review format (with these pair pods as
its mutator) are in ``tests/unit/test_admission.py``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from drakit.admission import WebhookOptions
from drakit.errors import ConfigInvalid
from drakit.host.mutators import load_mutators
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit_composite.admission import (
    CLAIM_NAME,
    PAIRS_ANNOTATION,
    POLICY_ANNOTATION,
    TEMPLATE_ANNOTATION,
    AdmissionSettings,
    PairPods,
    plan_pod,
)

SETTINGS = AdmissionSettings()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("DRAKIT_"):
            monkeypatch.delenv(var)


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(
        DrakitSettings(plugins={"cpu": {}, "composite": {}}),
        NodeInfo(name="webhook", sysfs_root="/nonexistent"),
    )


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {}}], **spec},
    }


def apply_patch(obj: dict[str, Any], patch: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """RFC 6902 ``add`` (all the engine emits), applied as the API server would."""
    out: dict[str, Any] = json.loads(json.dumps(obj))
    for op in patch:
        assert op["op"] == "add"
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target: Any = out
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            target[last] = op["value"]
    return out


def devices(plan: Any) -> dict[str, Any]:
    return plan.template["spec"]["spec"]["devices"]  # type: ignore[no-any-return]


def test_a_pod_without_the_annotation_is_left_alone(host: PluginHost) -> None:
    assert plan_pod(host, SETTINGS, pod()) is None


def test_none_is_a_plain_count_and_the_pod_gets_its_claim(host: PluginHost) -> None:
    plan = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "4"}))
    assert plan is not None
    assert devices(plan) == {
        "requests": [{"name": "pairs", "exactly": {"deviceClassName": "gpu-nic-pair", "count": 4}}]
    }
    name = plan.template["metadata"]["name"]
    assert name.startswith("gpu-nic-pairs-4-none-")  # what it holds, not whose it is
    mutated = apply_patch(pod({PAIRS_ANNOTATION: "4"}), plan.patch)
    assert mutated["metadata"]["annotations"][TEMPLATE_ANNOTATION] == name
    assert mutated["spec"]["resourceClaims"] == [
        {"name": CLAIM_NAME, "resourceClaimTemplateName": name}
    ]
    for c in mutated["spec"]["containers"]:
        assert c["resources"]["claims"] == [{"name": CLAIM_NAME}]
    # what the claim made from the template carries
    assert plan.template["spec"]["metadata"]["annotations"] == {
        PAIRS_ANNOTATION: "4",
        POLICY_ANNOTATION: "none",
    }


def test_existing_claims_and_annotations_are_kept(host: PluginHost) -> None:
    before = pod(
        {PAIRS_ANNOTATION: "2", "team": "x"},
        resourceClaims=[{"name": "cpus", "resourceClaimTemplateName": "cpus"}],
    )
    before["spec"]["containers"][0]["resources"] = {"claims": [{"name": "cpus"}]}
    plan = plan_pod(host, SETTINGS, before)
    assert plan is not None
    after = apply_patch(before, plan.patch)
    assert [c["name"] for c in after["spec"]["resourceClaims"]] == ["cpus", CLAIM_NAME]
    assert after["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "cpus"},
        {"name": CLAIM_NAME},
    ]
    assert after["metadata"]["annotations"]["team"] == "x"


def test_preferred_is_a_ladder_numa_then_socket_then_anywhere(host: PluginHost) -> None:
    plan = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "preferred"}))
    assert plan is not None
    spec = devices(plan)
    [request] = spec["requests"]
    assert [s["name"] for s in request["firstAvailable"]] == ["aligned", "fallback-1", "any"]
    assert {s["count"] for s in request["firstAvailable"]} == {4}
    assert spec["constraints"] == [
        {"requests": ["pairs/aligned"], "matchAttribute": "resource.kubernetes.io/numaNode"},
        {"requests": ["pairs/fallback-1"], "matchAttribute": "pairs.composite.drakit.io/socket"},
    ]


def test_required_is_one_hard_constraint(host: PluginHost) -> None:
    plan = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "required"}))
    assert plan is not None
    assert devices(plan) == {
        "requests": [{"name": "pairs", "exactly": {"deviceClassName": "gpu-nic-pair", "count": 4}}],
        "constraints": [
            {"requests": ["pairs"], "matchAttribute": "resource.kubernetes.io/numaNode"}
        ],
    }


@pytest.mark.parametrize("how", ["flag", "label"])
def test_kueue_mode_emits_exactly_only(host: PluginHost, how: str) -> None:
    settings = AdmissionSettings(kueue=how == "flag")
    p = pod({PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "preferred"})
    if how == "label":
        p["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    plan = plan_pod(host, settings, p)
    assert plan is not None
    assert all("exactly" in r for r in devices(plan)["requests"])
    assert "constraints" not in devices(plan)
    [warning] = plan.warnings
    assert "Kueue rejects" in warning
    required = plan_pod(
        host,
        settings,
        {
            **p,
            "metadata": {
                **p["metadata"],
                "annotations": {PAIRS_ANNOTATION: "4", POLICY_ANNOTATION: "required"},
            },
        },
    )
    assert required is not None
    assert all("exactly" in r for r in devices(required)["requests"])


def test_readmission_is_idempotent(host: PluginHost) -> None:
    first = pod({PAIRS_ANNOTATION: "3", POLICY_ANNOTATION: "preferred"})
    plan = plan_pod(host, SETTINGS, first)
    assert plan is not None
    mutated = apply_patch(first, plan.patch)
    assert plan_pod(host, SETTINGS, mutated) is None


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({PAIRS_ANNOTATION: "four"}, PAIRS_ANNOTATION),
        ({PAIRS_ANNOTATION: "0"}, PAIRS_ANNOTATION),
        ({PAIRS_ANNOTATION: "129"}, PAIRS_ANNOTATION),
        ({PAIRS_ANNOTATION: "\u00b2"}, PAIRS_ANNOTATION),  # a digit to str.isdigit, not to int
        ({PAIRS_ANNOTATION: "\u0663"}, PAIRS_ANNOTATION),  # Arabic-Indic 3: not a count here
        ({PAIRS_ANNOTATION: "9" * 5000}, PAIRS_ANNOTATION),  # beyond int()'s digit limit
        ({PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "strict"}, POLICY_ANNOTATION),
    ],
)
def test_bad_annotations_are_refused_naming_the_annotation(
    host: PluginHost, annotations: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigInvalid) as info:
        plan_pod(host, SETTINGS, pod(annotations))
    [(path, message)] = info.value.errors
    assert path == f"metadata.annotations[{named}]"
    assert "use one of" in message or "example" in message
    assert len(message) < 300


def test_a_taken_claim_name_is_refused(host: PluginHost) -> None:
    p = pod(
        {PAIRS_ANNOTATION: "2"}, resourceClaims=[{"name": CLAIM_NAME, "resourceClaimName": "x"}]
    )
    with pytest.raises(ConfigInvalid, match="rename yours"):
        plan_pod(host, SETTINGS, p)


def test_the_webhook_loads_the_composite_pair_pods_through_its_entry_point() -> None:
    options = WebhookOptions(kueue=True, flags={"pair_class": "my-pairs"})
    [mutator] = load_mutators(options, {"composite": "pairs.example.com"})
    assert isinstance(mutator, PairPods)
    assert mutator.settings == AdmissionSettings(
        kueue=True, pair_class="my-pairs", pairs_driver="pairs.example.com"
    )
    [default] = load_mutators(WebhookOptions(), {})
    assert isinstance(default, PairPods)
    assert default.settings == SETTINGS


def test_same_request_same_template_in_any_pod(host: PluginHost) -> None:
    a = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "required"}))
    b = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "required"}))
    c = plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "preferred"}))
    assert a is not None
    assert b is not None
    assert c is not None
    assert a.template == b.template
    assert a.template["metadata"]["name"] != c.template["metadata"]["name"]
    other = AdmissionSettings(pair_class="other-pairs")  # other content: another name
    d = plan_pod(host, other, pod({PAIRS_ANNOTATION: "2", POLICY_ANNOTATION: "required"}))
    assert d is not None
    assert d.template["metadata"]["name"] != a.template["metadata"]["name"]


def test_pod_needs_the_template_its_claim_entry_names(host: PluginHost) -> None:
    mutator = PairPods(SETTINGS)
    before = pod({PAIRS_ANNOTATION: "3", POLICY_ANNOTATION: "required"})
    plan = plan_pod(host, SETTINGS, before)
    assert plan is not None
    admitted = apply_patch(before, plan.patch)
    needs = mutator.pod_needs(admitted, host)
    assert needs is not None
    assert needs.templates == (plan.template,)
    [event] = needs.events
    assert event.reason == "NUMAAlignmentRequired"
    assert "all 3 GPU-NIC pairs" in event.message
    none = apply_patch(
        pod({PAIRS_ANNOTATION: "3"}), plan_pod(host, SETTINGS, pod({PAIRS_ANNOTATION: "3"})).patch
    )  # type: ignore[union-attr]
    assert mutator.pod_needs(none, host).events == ()  # type: ignore[union-attr]


def test_pod_needs_nothing_from_fields_edited_after_admission(host: PluginHost) -> None:
    """Annotations are mutable, the claim entry is not: what it names is all a pod gets."""
    mutator = PairPods(SETTINGS)
    before = pod({PAIRS_ANNOTATION: "3"})
    plan = plan_pod(host, SETTINGS, before)
    assert plan is not None
    admitted = apply_patch(before, plan.patch)
    edited = json.loads(json.dumps(admitted))
    edited["metadata"]["annotations"][PAIRS_ANNOTATION] = "128"
    assert mutator.pod_needs(edited, host) is None
    renamed = json.loads(json.dumps(admitted))
    renamed["metadata"]["annotations"][TEMPLATE_ANNOTATION] = "someone-elses"
    assert mutator.pod_needs(renamed, host) is not None  # the annotation is not read
    foreign = json.loads(json.dumps(admitted))
    foreign["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "someone-elses"
    assert mutator.pod_needs(foreign, host) is None  # a hand-made pod naming any template
    assert mutator.pod_needs(pod(), host) is None
    bad = json.loads(json.dumps(admitted))
    bad["metadata"]["annotations"][PAIRS_ANNOTATION] = "lots"
    with pytest.raises(ConfigInvalid):
        mutator.pod_needs(bad, host)
