"""The admission engine without a cluster: opaque config validation, the review format.

The plugin host is real (the installed cpu and composite backends and the shipped
strategies). The engine holds no API client: no review, dry run or not, can make it create,
change or delete anything (``sideEffects: None``); the template controller that makes what
admitted pods need is covered by ``tests/e2e/test_webhook.py``. The pod mutator
the reviews go through is the composite's pair pods; what it plans is tested with the backend,
in ``plugins/composite/tests/test_admission.py``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit.webhook import AdmissionRequest, parse_review, to_review
from drakit.webhook.admission import Admission
from drakit_composite.admission import PAIRS_ANNOTATION, AdmissionSettings, PairPods

pytestmark = pytest.mark.usefixtures("clean_drakit_env")


@pytest.fixture(scope="module")
def host() -> PluginHost:
    return PluginHost(
        DrakitSettings(plugins={"cpu": {}, "composite": {}}),
        NodeInfo(name="webhook", sysfs_root="/nonexistent"),
    )


def review(kind: str, obj: dict[str, Any], *, dry_run: bool = True, group: str = "") -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "7f0c",
                "kind": {"group": group, "version": "v1", "kind": kind},
                "operation": "CREATE",
                "namespace": "ns",
                "name": obj.get("metadata", {}).get("name", ""),
                "object": obj,
                "dryRun": dry_run,
            },
        }
    ).encode()


@pytest.fixture(scope="module")
def engine(host: PluginHost) -> Admission:
    return Admission(host, [PairPods(AdmissionSettings())])


def cpu_claim(policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [{"name": "cpus", "exactly": {"deviceClassName": "cpu"}}],
                "config": [
                    {"opaque": {"driver": "other.example.com", "parameters": {"x": 1}}},
                    {
                        "opaque": {
                            "driver": "cpu.drakit.io",
                            "parameters": {
                                "apiVersion": "cpu.drakit.io/v1alpha1",
                                "kind": "CpuConfig",
                                "policy": policy,
                            },
                        }
                    },
                ],
            }
        },
    }


def test_a_bad_cpu_config_is_refused_naming_the_field(engine: Admission) -> None:
    res = engine.validate(parse_review(review("ResourceClaim", cpu_claim("tightest"))))
    assert not res.allowed
    assert "spec.devices.config[1].opaque.parameters.policy" in res.message
    assert "'packed', 'distributed' or 'spread'" in res.message
    assert engine.validate(parse_review(review("ResourceClaim", cpu_claim("packed")))).allowed


def test_templates_and_classes_are_checked_at_their_own_paths(engine: Admission) -> None:
    claim = cpu_claim("tightest")
    template = {"metadata": {"name": "t"}, "spec": {"spec": claim["spec"]}}
    res = engine.validate(parse_review(review("ResourceClaimTemplate", template)))
    assert "spec.spec.devices.config[1].opaque.parameters.policy" in res.message
    klass = {"metadata": {"name": "k"}, "spec": {"config": claim["spec"]["devices"]["config"]}}
    res = engine.validate(parse_review(review("DeviceClass", klass)))
    assert "spec.config[1].opaque.parameters.policy" in res.message
    unknown = json.loads(json.dumps(claim))
    unknown["spec"]["devices"]["config"][1]["opaque"]["parameters"]["kind"] = "GpuConfig"
    res = engine.validate(parse_review(review("ResourceClaim", unknown)))
    assert "opaque.parameters.kind: no plugin of driver 'cpu.drakit.io' owns" in res.message


def pair_pod(pairs: str) -> dict[str, Any]:
    """A pod for the composite's pair pods, the installed mutator these reviews go through."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "annotations": {PAIRS_ANNOTATION: pairs}},
        "spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {}}]},
    }


def test_dry_run_pod_review_round_trip(engine: Admission) -> None:
    req = parse_review(review("Pod", pair_pod("2")))
    answer = to_review(req.uid, engine.mutate_pod(req))
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/resourceClaims", "value": [ops[1]["value"][0]]} in ops
    # labelled for the template controller, which makes the template the entry names
    assert ops[-2:] == [
        {"op": "add", "path": "/metadata/labels", "value": {}},
        {"op": "add", "path": "/metadata/labels/webhook.drakit.io~1mutated", "value": "true"},
    ]
    bad = parse_review(review("Pod", pair_pod("x")))
    refused = to_review(bad.uid, engine.mutate_pod(bad))["response"]
    assert refused["allowed"] is False
    assert PAIRS_ANNOTATION in refused["status"]["message"]


def test_reviews_are_checked() -> None:
    with pytest.raises(ValueError, match="AdmissionReview"):
        parse_review(b'{"kind": "Pod"}')
    with pytest.raises(ValueError, match=r"admission.k8s.io/v1"):
        parse_review(b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1"}')
    assert isinstance(
        parse_review(review("Pod", {"apiVersion": "v1", "kind": "Pod", "metadata": {}})),
        AdmissionRequest,
    )
