"""What a starting node does before it first publishes, against the real API server.

The node reads its Node before the first discovery, so the backends see the Node's labels in
that round (the AINIC backend takes rails from them), and its first publish is the result of
that discovery, not of a second one. A backend installed for the test (a real entry point,
loaded by the real plugin host) counts its discovery rounds and publishes a label's value; the
node runs in this process (:class:`drakit.node.daemon.Node`, no kubelet sockets).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for

from drakit.host.settings import DrakitSettings
from drakit.kube import KubeClient
from drakit.node.daemon import Node

if TYPE_CHECKING:
    from tests.conftest import EntryPoints

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("clean_drakit_env")]

DRIVER = "zone.example.com"
LABEL = "example.com/zone"

COUNTING_BACKEND = f"""
    from drakit import PluginSettings, hookimpl
    from drakit.models import Device, DeviceInventory

    ROUNDS = []

    class Plugin:
        settings_model = PluginSettings
        default_driver = {DRIVER!r}

        def __init__(self, context):
            self.context = context

        @hookimpl
        def drakit_discover_devices(self, node):
            ROUNDS.append(dict(node.labels))  # every round, with the labels it was given
            zone = node.labels.get({LABEL!r}, "unknown")
            return DeviceInventory(devices=(Device(name="dev-0", attributes={{"zone": zone}}),))
"""


def published_zone(cp: ControlPlane, node: str) -> list[str]:
    """The ``zone`` attribute of every device in the node's slices."""
    path = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={node}"
    slices = cp.api("GET", path)
    devices = [d for s in slices["items"] for d in s["spec"].get("devices", [])]
    return [d["attributes"]["zone"]["string"] for d in devices]


def test_the_first_publish_is_the_start_discovery_with_the_node_labels(
    control_plane: ControlPlane,
    kube: KubeClient,
    fake_node: Callable[..., dict[str, Any]],
    entry_points: EntryPoints,
    tmp_path: Path,
) -> None:
    module = entry_points.install("drakit.plugins", "zones", COUNTING_BACKEND)
    name = fake_node(labels={LABEL: "a"})["metadata"]["name"]
    settings = DrakitSettings(
        node_name=name,
        state_dir=tmp_path / "state",
        cdi_dir=tmp_path / "cdi",
        metrics={"enabled": False},
        discovery={"interval": 3600},
        plugins={"zones": {}},
    )
    node = Node(settings, kube=kube, serve_kubelet=False, boot_id="b")
    node.start()
    try:
        publisher = node.publisher
        assert publisher is not None
        wait_for(lambda: publisher.synced, timeout=30, what="the first publish")
        assert published_zone(control_plane, name) == ["a"]
        rounds = importlib.import_module(module).ROUNDS
        assert [r.get(LABEL) for r in rounds] == ["a"]  # one discovery, and it saw the label
    finally:
        node.stop(grace=0)
