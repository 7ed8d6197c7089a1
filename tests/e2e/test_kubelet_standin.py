"""drakit's kubelet-facing gRPC server driven by the kubelet's own code.

The stand-in (hack/control-plane/kubelet-standin) links the kubelet's plugin
watcher and DRA manager; its raw subcommands fail on protobuf fields the
published k8s.io/kubelet clients do not know.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import KubeletStandIn, wait_for

from drakit.kubelet.health import HealthBroadcaster
from drakit.kubelet.server import KubeletPluginServer
from drakit.models import (
    ClaimPrepareResult,
    ClaimRef,
    ClaimUnprepareResult,
    DeviceHealth,
    PreparedDeviceRef,
)

pytestmark = pytest.mark.e2e

DRIVER = "standin.e2e.drakit.dev"


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    """A short kubelet root (Unix socket paths must stay below 108 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="dk-", dir="/tmp"))
    (root / "plugins_registry").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


class AllocationHandler:
    """Prepares each claim by reporting its allocated devices with one CDI ID per device."""

    def __init__(self, kube_dynamic: Any) -> None:
        self._claims = kube_dynamic.resources.get(
            api_version="resource.k8s.io/v1", kind="ResourceClaim"
        )
        self.prepared: list[ClaimRef] = []
        self.unprepared: list[ClaimRef] = []

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        results: dict[str, ClaimPrepareResult] = {}
        for ref in claims:
            self.prepared.append(ref)
            claim = self._claims.get(namespace=ref.namespace, name=ref.name).to_dict()
            devices = [
                PreparedDeviceRef(
                    requests=[r["request"]],
                    pool=r["pool"],
                    device=r["device"],
                    cdi_device_ids=[f"{DRIVER}/gpu={r['device']}"],
                )
                for r in claim["status"]["allocation"]["devices"]["results"]
                if r["driver"] == DRIVER
            ]
            results[ref.uid] = ClaimPrepareResult(devices=devices)
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        self.unprepared.extend(claims)
        return {ref.uid: ClaimUnprepareResult() for ref in claims}


class NullHandler:
    """A handler for tests that never prepare anything."""

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        return {ref.uid: ClaimPrepareResult(error="not expected") for ref in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        return {ref.uid: ClaimUnprepareResult() for ref in claims}


def test_usage_error_is_one_json_document(kubelet_standin: KubeletStandIn) -> None:
    result = kubelet_standin.run("no-such-subcommand")
    assert result.exit_code == 2
    assert "unknown subcommand" in result.doc["error"]


def test_raw_getinfo_against_drakit_registration_server(
    kubelet_standin: KubeletStandIn, kubelet_dir: Path
) -> None:
    with KubeletPluginServer(DRIVER, NullHandler(), kubelet_dir=kubelet_dir) as server:
        result = kubelet_standin.run("raw-getinfo", f"--socket={server.registration_socket}")
    assert result.exit_code == 0, result.doc
    assert result.doc["unknown_fields"] == []
    info = result.doc["info"]
    assert info["type"] == "DRAPlugin"
    assert info["name"] == DRIVER
    assert info["endpoint"] == str(server.dra_socket)
    assert info["supported_versions"] == list(server.supported_versions)
    assert result.doc["chosen_service"] == "v1.DRAPlugin"
    assert result.doc["validation_error"] == ""
    assert result.doc["elapsed_ms"] < 1000


def test_kubelet_plugin_watcher_registers_drakit_server(
    kubelet_standin: KubeletStandIn, kubelet_dir: Path, tmp_path: Path
) -> None:
    with KubeletPluginServer(DRIVER, NullHandler(), kubelet_dir=kubelet_dir) as server:
        result = kubelet_standin.run(
            "register",
            f"--registry-dir={kubelet_dir / 'plugins_registry'}",
            f"--state-dir={tmp_path / 'state'}",
            f"--driver={DRIVER}",
            "--timeout=30s",
        )
        assert result.exit_code == 0, (result.doc, result.stderr[-2000:])
        assert result.doc["registered"] is True
        assert server.wait_registered(timeout=5)
    register_events = [e for e in result.doc["events"] if e["op"] == "register"]
    assert register_events[0]["endpoint"] == str(server.dra_socket)


class StaticHandler:
    """Prepares every claim with one fixed device."""

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimPrepareResult]:
        device = PreparedDeviceRef(
            requests=["gpu"], pool="pool-a", device="gpu-0", cdi_device_ids=[f"{DRIVER}/gpu=gpu-0"]
        )
        return {ref.uid: ClaimPrepareResult(devices=[device]) for ref in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, ClaimUnprepareResult]:
        return {ref.uid: ClaimUnprepareResult() for ref in claims}


@pytest.mark.parametrize("service", ["v1", "v1beta1"])
def test_raw_prepare_and_unprepare_replies_are_strictly_known(
    kubelet_standin: KubeletStandIn, kubelet_dir: Path, service: str
) -> None:
    claim = f"--claim=ns1/claim-a/{uuid.uuid4()}"
    with KubeletPluginServer(DRIVER, StaticHandler(), kubelet_dir=kubelet_dir) as server:
        endpoint = f"--endpoint={server.dra_socket}"
        prepared = kubelet_standin.run("raw-prepare", endpoint, f"--service={service}", claim)
        unprepared = kubelet_standin.run("raw-unprepare", endpoint, f"--service={service}", claim)
    assert prepared.exit_code == 0, prepared.doc
    assert prepared.doc["unknown_fields"] == []
    [result] = prepared.doc["response"]["claims"].values()
    assert result["error"] == ""
    [device] = result["devices"]
    assert device["pool_name"] == "pool-a"
    assert device["device_name"] == "gpu-0"
    assert device["request_names"] == ["gpu"]
    assert device["cdi_device_ids"] == [f"{DRIVER}/gpu=gpu-0"]
    assert unprepared.exit_code == 0, unprepared.doc
    assert unprepared.doc["unknown_fields"] == []


def test_raw_health_without_health_service_is_unimplemented(
    kubelet_standin: KubeletStandIn, kubelet_dir: Path
) -> None:
    with KubeletPluginServer(DRIVER, NullHandler(), kubelet_dir=kubelet_dir) as server:
        result = kubelet_standin.run(
            "raw-health", f"--endpoint={server.dra_socket}", "--service=v1", "--seconds=3"
        )
    assert result.exit_code == 5, result.doc
    assert result.doc["end"] == "unimplemented"


def unhealthy(pool: str, device: str) -> HealthBroadcaster:
    """A health source reporting one unhealthy device."""
    return HealthBroadcaster(
        [
            DeviceHealth(
                pool=pool,
                device=device,
                health="Unhealthy",
                message="ECC errors",
                last_updated=datetime.now(UTC),
            )
        ]
    )


@pytest.mark.parametrize("service", ["v1", "v1alpha1"])
def test_raw_health_stream_is_strictly_known(
    kubelet_standin: KubeletStandIn, kubelet_dir: Path, service: str
) -> None:
    with KubeletPluginServer(
        DRIVER, NullHandler(), kubelet_dir=kubelet_dir, health_source=unhealthy("pool-a", "gpu-0")
    ) as server:
        result = kubelet_standin.run(
            "raw-health",
            f"--endpoint={server.dra_socket}",
            f"--service={service}",
            "--seconds=10",
            "--max-responses=1",
        )
    assert result.exit_code == 0, result.doc
    assert result.doc["unknown_fields"] == []
    [device] = result.doc["responses"][0]["devices"]
    assert device["device"] == {"pool_name": "pool-a", "device_name": "gpu-0"}
    assert device["health"] == "UNHEALTHY"
    assert device["message"] == "ECC errors"


@pytest.mark.slow
def test_kubelet_prepares_scheduled_pod_through_drakit(
    kubelet_standin: KubeletStandIn,
    kubelet_dir: Path,
    tmp_path: Path,
    kube_dynamic: Any,
    namespace: str,
    fake_node: Callable[..., dict[str, Any]],
) -> None:
    pods = kube_dynamic.resources.get(api_version="v1", kind="Pod")
    node = fake_node()["metadata"]["name"]
    class_name = f"e2e-{uuid.uuid4().hex[:6]}.{DRIVER}"
    classes = kube_dynamic.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    classes.create(
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": class_name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    try:
        kube_dynamic.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice").create(
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-{DRIVER}"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}],
                },
            }
        )
        kube_dynamic.resources.get(
            api_version="resource.k8s.io/v1", kind="ResourceClaimTemplate"
        ).create(
            namespace=namespace,
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one"},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": class_name}}
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
                            "name": "with",
                            "image": "registry.invalid/noop",
                            "resources": {"claims": [{"name": "gpu"}]},
                        },
                        {"name": "without", "image": "registry.invalid/noop"},
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}],
                },
            },
        )
        wait_for(
            lambda: pods.get(name="p1", namespace=namespace).spec.nodeName,
            timeout=60,
            what="pod p1 to be scheduled",
        )
        handler = AllocationHandler(kube_dynamic)
        common = [
            f"--registry-dir={kubelet_dir / 'plugins_registry'}",
            f"--state-dir={tmp_path / 'state'}",
            f"--node={node}",
            f"--pod={namespace}/p1",
            "--timeout=60s",
        ]
        with KubeletPluginServer(
            DRIVER, handler, kubelet_dir=kubelet_dir, health_source=unhealthy(node, "gpu-0")
        ):
            prepared = kubelet_standin.run("prepare", *common)
            assert prepared.exit_code == 0, (prepared.doc, prepared.stderr[-3000:])
            containers = prepared.doc["containers"]
            assert containers["with"]["cdi_devices"] == [f"{DRIVER}/gpu=gpu-0"]
            assert containers["without"]["cdi_devices"] == []
            [claim] = containers["with"]["claims"]
            [device] = claim["drivers"][DRIVER]["devices"]
            assert (device["pool"], device["device"], device["request_names"]) == (
                node,
                "gpu-0",
                ["gpu"],
            )
            assert [ref.name for ref in handler.prepared] == [claim["name"]]

            health = kubelet_standin.run("pod-health", *common, "--wait=3s")
            assert health.exit_code == 0, (health.doc, health.stderr[-3000:])
            [status] = health.doc["allocated_resources_status"]["with"]
            assert status["name"] == "claim:gpu"  # the pod's claim name, no request given
            assert [(r["resourceID"], r["health"]) for r in status["resources"]] == [
                (f"{DRIVER}/gpu=gpu-0", "Unhealthy")  # resourceID is the CDI device ID
            ]
            assert health.doc["allocated_resources_status"]["without"] == []

            unprepared = kubelet_standin.run("unprepare", *common)
            assert unprepared.exit_code == 0, (unprepared.doc, unprepared.stderr[-3000:])
            assert [ref.uid for ref in handler.unprepared] == [claim["uid"]]
    finally:
        classes.delete(name=class_name)
