"""KEP-5517: the CPU backend's ``nodeAllocatableResources`` as a 1.37 API server takes them.

The control plane runs with the alpha gate ``DRANodeAllocatableResources`` on (the session
fixture's gates). The CPU backend (``node_allocatable: true``) on a simulated node publishes, in
both device modes, a mapping of its devices to the node's ``cpu``; the slices drakit renders are
created on the API server and read back with the field intact (the server drops fields of gates
that are off, so a dropped field would show here).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane
from tests.e2e.nodeproc import RESOURCE

from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("mode", "mapping"),
    [
        ("grouped", {"capacityKey": "cpu", "capacityMultiplier": "1"}),
        ("individual", {"deviceMultiplier": "1"}),
    ],
)
def test_the_api_server_keeps_the_cpu_mapping(
    control_plane: ControlPlane, mode: str, mapping: dict[str, str]
) -> None:
    driver = f"na-{mode}.cpu.drakit.io"
    plugins = {"cpu": {"driver": driver, "mode": mode, "node_allocatable": True}}
    with open_host(
        DrakitSettings(profile="minimal-1s", node_name=f"na-{mode}", plugins=plugins)
    ) as host:
        slices = build_inventory(host).slices()
    assert slices
    # The server admits the field only on a slice of a node that declares the feature
    # (status.declaredFeatures, which the 1.37 kubelet fills with the gate on).
    node = control_plane.create_node(f"na-{mode}")
    node["status"]["declaredFeatures"] = ["DRANodeAllocatableResources"]
    node = control_plane.api("PUT", f"/api/v1/nodes/na-{mode}/status", node)
    assert node["status"].get("declaredFeatures") == ["DRANodeAllocatableResources"]
    try:
        for body in slices:
            got: dict[str, Any] = control_plane.api("POST", f"{RESOURCE}/resourceslices", body)
            for sent, kept in zip(body["spec"]["devices"], got["spec"]["devices"], strict=True):
                assert sent["nodeAllocatableResources"] == {"cpu": {"mapping": mapping}}
                assert kept.get("nodeAllocatableResources") == sent["nodeAllocatableResources"], (
                    f"the API server dropped or changed the field of {kept['name']}"
                )
    finally:
        control_plane.delete_node(f"na-{mode}")  # its slices too
