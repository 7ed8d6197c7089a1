"""AINIC rails from Node labels, end to end: a fabric manager labels the Node, the slice follows.

One ``drakit node`` on ``h200-8gpu-8ainic`` (every PF whole) against the real API server, with
a discovery round every second. The test plays the fabric manager: it labels the Node
``ainic.drakit.io/rail.<ifName>`` and ``ainic.drakit.io/fabric``, and the NICs' ``rail`` and
``fabric`` attributes in the published ResourceSlice follow the labels as they are set, changed
and removed (``docs/ainic-backend.md``, "Rails and fabrics").
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane, wait_for
from tests.e2e.nodeproc import DRIVERS, RESOURCE, NodeDirs, NodeProcess

pytestmark = pytest.mark.e2e

NIC = DRIVERS["amd_ainic"]
PREFIX = "ainic.drakit.io"


def label(cp: ControlPlane, node: str, labels: dict[str, str | None]) -> None:
    """Merge-patch the Node's labels (``None`` removes one), as a fabric manager would."""
    status, data = cp._http(
        "PATCH",
        f"{cp.server}/api/v1/nodes/{node}",
        {"metadata": {"labels": labels}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, data[:300]


def published(cp: ControlPlane, node: str) -> dict[str, dict[str, Any]]:
    """Device name -> attribute values in the node's AINIC slices."""
    slices = cp.api("GET", f"{RESOURCE}/resourceslices?fieldSelector=spec.nodeName={node}")
    out: dict[str, dict[str, Any]] = {}
    for s in slices["items"]:
        if s["spec"]["driver"] != NIC:
            continue
        for d in s["spec"].get("devices", []):
            attrs = d.get("attributes", {})
            out[d["name"]] = {k: next(iter(v.values())) for k, v in attrs.items()}
    return out


@pytest.fixture(scope="module")
def node(control_plane: ControlPlane) -> Iterator[str]:
    cp = control_plane
    name = f"nic-labels-{uuid.uuid4().hex[:6]}"
    cp.create_node(name, labels={f"{PREFIX}/rail.enp24s0": "3"})
    dirs = NodeDirs.create("dk-nicl-")
    proc = NodeProcess(
        kubeconfig=cp.kubeconfig,
        node_name=name,
        dirs=dirs,
        plugins={"amd_ainic": {}},
        profile="h200-8gpu-8ainic",
        settings={"discovery": {"interval": 1}},
        instance_id="nic-labels",
    )
    try:
        with proc:
            proc.wait_ready(timeout=90)
            yield name
    finally:
        cp.delete_node(name)
        dirs.remove()


def rail_and_fabric(cp: ControlPlane, node: str, device: str) -> tuple[Any, Any]:
    a = published(cp, node).get(device, {})
    return a.get("rail"), a.get("fabric")


def test_rails_and_fabric_follow_the_node_labels(control_plane: ControlPlane, node: str) -> None:
    cp = control_plane

    def shows(device: str, want: tuple[Any, Any]) -> bool:
        return rail_and_fabric(cp, node, device) == want

    # the label the Node was created with is there from the first slice
    wait_for(lambda: shows("ainic-0", (3, None)), timeout=60, what="rail 3 from the label")
    assert rail_and_fabric(cp, node, "ainic-1") == (None, None)
    label(cp, node, {f"{PREFIX}/rail.enp64s0": "3", f"{PREFIX}/fabric": "pod-a"})
    wait_for(lambda: shows("ainic-1", (3, "pod-a")), timeout=60, what="ainic-1 on rail 3")
    assert rail_and_fabric(cp, node, "ainic-0") == (3, "pod-a")
    label(cp, node, {f"{PREFIX}/rail.enp24s0": "5"})  # the fabric manager moves a NIC
    wait_for(lambda: shows("ainic-0", (5, "pod-a")), timeout=60, what="ainic-0 moved to rail 5")
    label(cp, node, {f"{PREFIX}/rail.enp24s0": None, f"{PREFIX}/fabric": None})
    wait_for(lambda: shows("ainic-0", (None, None)), timeout=60, what="the rail label removed")
    assert rail_and_fabric(cp, node, "ainic-1") == (3, None)
