"""drakit.kube.KubeClient against the real API server: raw JSON, error mapping, watch, events.

Also the publisher's dropped-field detection against a server that really drops a field.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane

from drakit.errors import PermanentError, RetryableError
from drakit.kube import ConflictError, KubeClient, NotFoundError
from drakit.models import Device
from drakit.publish import publisher as publisher_module
from drakit.publish.publisher import DroppedFieldsError, ResourceSlicePublisher
from drakit.publish.render import PoolSpec, render_checked, render_pool

pytestmark = pytest.mark.e2e

DRIVER = "kube.e2e.drakit.dev"


def one_slice(node_name: str, devices: int = 1) -> dict[str, Any]:
    spec = PoolSpec(
        driver=DRIVER,
        node=node_name,
        pool=node_name,
        devices=tuple(Device(name=f"d{i}", capacity={"mem": "1Gi"}) for i in range(devices)),
    )
    (obj,) = render_pool(spec)
    return obj


def test_crud_round_trip_keeps_raw_json(
    kube: KubeClient, fake_node: Callable[..., dict[str, Any]]
) -> None:
    node = fake_node()
    name = node["metadata"]["name"]
    got = kube.get_node(name)
    assert got is not None
    assert got["metadata"]["uid"] == node["metadata"]["uid"]
    assert kube.get_node("no-such-node") is None

    created = kube.create_resource_slice(one_slice(name))
    assert created["apiVersion"] == "resource.k8s.io/v1"
    assert created["spec"]["devices"][0]["capacity"]["mem"]["value"] == "1Gi"  # camelCase, raw
    (listed,) = kube.list_resource_slices(name, DRIVER)
    assert listed["metadata"]["uid"] == created["metadata"]["uid"]
    assert kube.list_resource_slices(name, "other.example.com") == []

    with pytest.raises(ConflictError, match="already exists"):
        kube.create_resource_slice(one_slice(name))
    stale = dict(created)
    updated = kube.update_resource_slice(one_slice(name, 2) | {"metadata": created["metadata"]})
    assert len(updated["spec"]["devices"]) == 2
    with pytest.raises(ConflictError):
        kube.update_resource_slice(stale)  # old resourceVersion
    with pytest.raises(ConflictError):
        kube.delete_resource_slice(created["metadata"]["name"], uid="not-the-uid")
    kube.delete_resource_slice(created["metadata"]["name"], uid=created["metadata"]["uid"])
    kube.delete_resource_slice(created["metadata"]["name"])  # gone already: fine
    assert kube.list_resource_slices(name) == []


def test_invalid_slice_is_a_permanent_error_with_the_servers_message(
    kube: KubeClient,
) -> None:
    obj = one_slice("n1")
    obj["spec"]["devices"][0]["name"] = "Not_A_DNS_Label"
    with pytest.raises(PermanentError, match=r"\(422\).*Not_A_DNS_Label") as err:
        kube.create_resource_slice(obj, dry_run=True)
    assert not isinstance(err.value, NotFoundError | ConflictError)


def test_claims_and_events(kube: KubeClient, namespace: str) -> None:
    with pytest.raises(NotFoundError):
        kube.get_resource_claim(namespace, "missing")
    event = kube.create_event(
        {"apiVersion": "v1", "kind": "Namespace", "name": namespace}, "Testing", "hello"
    )
    assert event["reason"] == "Testing"
    assert event["type"] == "Warning"


def test_unreachable_server_is_retryable_quick_and_quiet(
    control_plane: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = json.loads(control_plane.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(cfg))
    client = KubeClient.from_kubeconfig(path)
    began = time.monotonic()
    with pytest.raises(RetryableError, match="connection refused"):
        client.list_resource_slices("n1")
    assert time.monotonic() - began < 2
    assert not [r for r in caplog.records if r.name.startswith("urllib3")], "urllib3 retried"
    client.close()


def test_watch_sees_changes_and_stops_promptly(
    kube: KubeClient, control_plane: ControlPlane, fake_node: Callable[..., dict[str, Any]]
) -> None:
    name = fake_node()["metadata"]["name"]
    stop = threading.Event()
    events: list[tuple[str, str]] = []
    connected = threading.Event()

    def watch() -> None:
        for etype, obj in kube.watch_resource_slices(name, stop, 60, on_connect=connected.set):
            events.append((etype, obj["metadata"].get("name", "")))

    t = threading.Thread(target=watch)
    t.start()
    assert connected.wait(10)
    created = kube.create_resource_slice(one_slice(name))
    slice_name = created["metadata"]["name"]
    kube.delete_resource_slice(slice_name)
    deadline = time.monotonic() + 10
    while ("DELETED", slice_name) not in events and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ("ADDED", slice_name) in events
    assert ("DELETED", slice_name) in events
    began = time.monotonic()
    stop.set()
    t.join(timeout=5)
    assert not t.is_alive()
    assert time.monotonic() - began < 2


def test_a_field_the_server_drops_is_reported_once(
    kube: KubeClient,
    control_plane: ControlPlane,
    fake_node: Callable[..., dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A field unknown to the server is dropped (fieldValidation defaults to Warn).

    That is what a disabled feature gate looks like from the client, so it exercises the
    detection against the real server.
    """
    node = fake_node()
    name = node["metadata"]["name"]
    real_render = render_checked

    def render_with_future_field(spec: PoolSpec, *, generation: int = 0) -> list[dict[str, Any]]:
        out = real_render(spec, generation=generation)
        out[0]["spec"]["devices"][0]["allowMultipleAllocationsV2"] = True
        return out

    monkeypatch.setattr(publisher_module, "render_checked", render_with_future_field)
    pools = [
        PoolSpec(
            driver=DRIVER, node=name, pool=name, devices=(Device(name="d0"), Device(name="d1"))
        )
    ]
    pub = ResourceSlicePublisher(kube, name, lambda: pools, drivers={DRIVER})
    with pytest.raises(DroppedFieldsError) as err:
        pub.sync_once()
    assert str(err.value).endswith(
        "spec.devices[0].allowMultipleAllocationsV2 was dropped by the API server"
    )
    assert pub.synced
    for _ in range(3):
        assert pub.sync_once().writes == 0
    assert pub.last_error == str(err.value)
    events = control_plane.api("GET", "/api/v1/namespaces/default/events")["items"]
    assert any(
        e["reason"] == "DroppedFields" and e["involvedObject"]["name"] == name for e in events
    )
