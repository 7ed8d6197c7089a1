"""The real control plane: it is up, serves resource.k8s.io/v1 and allocates devices.

The ResourceSlice is written by hand here; later the drakit renderer feeds it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for

pytestmark = pytest.mark.e2e

DRIVER = "gpu.e2e.drakit.dev"


def test_control_plane_is_up(control_plane: ControlPlane) -> None:
    control_plane.check_alive()
    version = control_plane.api("GET", "/version")
    assert version["gitVersion"].startswith("v1.")
    assert version["gitVersion"] != "v0.0.0-master+$Format:%H$", "binaries lack version stamping"
    assert set(control_plane.pids()) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    }


def test_resource_v1_is_served(control_plane: ControlPlane) -> None:
    group = control_plane.api("GET", "/apis/resource.k8s.io")
    assert "resource.k8s.io/v1" in {v["groupVersion"] for v in group["versions"]}
    resources = {
        r["name"] for r in control_plane.api("GET", "/apis/resource.k8s.io/v1")["resources"]
    }
    assert {
        "resourceslices",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
    } <= resources


def test_requested_feature_gates_are_enabled(control_plane: ControlPlane) -> None:
    gates = [g for g in control_plane.report.feature_gates.split(",") if g]
    metrics = control_plane.get_text("/metrics")
    for gate in gates:
        name, _, value = gate.partition("=")
        expected = "1" if value == "true" else "0"
        assert f'kubernetes_feature_enabled{{name="{name}",stage="' in metrics
        assert any(
            line.startswith(f'kubernetes_feature_enabled{{name="{name}",')
            and line.endswith(f" {expected}")
            for line in metrics.splitlines()
        ), gate


def test_fake_node_is_schedulable(fake_node: Callable[..., dict[str, Any]]) -> None:
    node = fake_node(labels={"drakit.dev/pool": "a"})
    assert not node["spec"].get("taints")
    assert not node["spec"].get("unschedulable")
    assert node["status"]["allocatable"]["pods"] == "110"
    assert node["metadata"]["labels"]["drakit.dev/pool"] == "a"


@pytest.fixture
def device_class(kube_dynamic: Any) -> Iterator[str]:
    """A DeviceClass selecting the test driver's devices."""
    name = f"e2e-{uuid.uuid4().hex[:6]}.{DRIVER}"
    api = kube_dynamic.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    api.create(
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    yield name
    api.delete(name=name)


def resource_slice(node: str, devices: list[str]) -> dict[str, Any]:
    """A hand-written v1 ResourceSlice with one complete pool per node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": dev,
                    "attributes": {"model": {"string": "E2E-1"}, "index": {"int": i}},
                    "capacity": {"memory": {"value": "16Gi"}},
                }
                for i, dev in enumerate(devices)
            ],
        },
    }


@pytest.mark.slow
def test_template_claim_is_created_and_allocated(
    control_plane: ControlPlane,
    kube_dynamic: Any,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
    device_class: str,
) -> None:
    pods = kube_dynamic.resources.get(api_version="v1", kind="Pod")
    node = fake_node()["metadata"]["name"]
    slices = kube_dynamic.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    templates = kube_dynamic.resources.get(
        api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate"
    )
    claims = kube_dynamic.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")

    slices.create(body=resource_slice(node, ["gpu-0", "gpu-1"]))
    templates.create(
        namespace=namespace,
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {
                                    "deviceClassName": device_class,
                                    "selectors": [
                                        {
                                            "cel": {
                                                "expression": 'device.attributes["'
                                                + DRIVER
                                                + '"].index == 1'
                                            }
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                }
            },
        },
    )
    pods.create(
        namespace=namespace,
        body={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p1"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/noop",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        },
    )

    def bound_pod() -> Any:
        pod = pods.get(name="p1", namespace=namespace)
        return pod if pod.spec.nodeName and pod.status.resourceClaimStatuses else None

    pod = wait_for(bound_pod, timeout=60, what="pod p1 to be scheduled with its claim")
    assert pod.spec.nodeName == node
    claim_name = pod.status.resourceClaimStatuses[0].resourceClaimName
    claim = claims.get(namespace=namespace, name=claim_name).to_dict()

    # Created by the resourceclaim controller (owned by the pod), allocated by the scheduler.
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod.metadata.uid
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["request"], r["driver"], r["pool"], r["device"]) for r in results] == [
        ("gpu", DRIVER, node, "gpu-1")
    ]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.metadata.uid]
    node_terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert node_terms[0]["matchFields"][0]["values"] == [node]

    # Without a kubelet the pod must be force-deleted; the controllers then
    # release and garbage-collect the generated claim.
    pods.delete(name="p1", namespace=namespace, body={"gracePeriodSeconds": 0})

    def claim_gone() -> bool:
        found = claims.get(namespace=namespace, field_selector=f"metadata.name={claim_name}")
        return not found.items

    wait_for(claim_gone, timeout=60, what=f"claim {claim_name} to be garbage-collected")
    control_plane.check_alive()
