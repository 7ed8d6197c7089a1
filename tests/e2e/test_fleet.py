"""``drakit fleet``: simulated nodes against the real API server (the CI smoke run: 6 nodes).

The benchmark (``benchmarks/fleet.py``) runs the same command with 1,000 nodes; here a handful
of nodes in two worker processes, with a 1 s resync interval so that several full resyncs happen
in the few seconds the fleet runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.controlplane import ControlPlane

from drakit.kube import KubeClient
from drakit.node.fleet import EXAMPLE_GPU, FLEET_LABEL, SHAPE_LABEL

pytestmark = pytest.mark.e2e

DRAKIT = str(Path(sys.executable).with_name("drakit"))


def fleet(*args: str, timeout: float = 240) -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [DRAKIT, "fleet", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def by_event(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["event"]: e for e in events}


def test_a_fleet_publishes_every_node_then_writes_nothing(
    control_plane: ControlPlane, kube: KubeClient
) -> None:
    prefix = f"fl-{uuid.uuid4().hex[:5]}"
    kc = str(control_plane.kubeconfig)
    code, events, err = fleet(
        "run",
        "--kubeconfig",
        kc,
        "--nodes",
        "6",
        "--processes",
        "2",
        "--shape",
        "h200-8gpu-8ainic",
        "--shape",
        EXAMPLE_GPU,
        "--interval",
        "1",
        "--stats-interval",
        "0.5",
        "--duration",
        "3",
        "--prefix",
        prefix,
    )
    try:
        assert code == 0, err[-2000:]
        ev = by_event(events)
        shapes = ev["shapes"]["shapes"]
        assert shapes[EXAMPLE_GPU] == {
            "devices": 8,
            "counter_sets": 0,
            "drivers": ["gpu.example.com"],
        }
        assert shapes["h200-8gpu-8ainic"]["counter_sets"] > 0  # the composite's pairs
        published, stopped = ev["published"], ev["stopped"]
        assert published["synced"] == 6
        assert published["errors"] == 0
        # steady state: every node resynced at least twice more (1 s interval), and wrote nothing
        assert stopped["syncs"] >= published["syncs"] + 2 * 6
        assert stopped["writes"] == published["writes"]
        assert stopped["rss_kib_per_node"] > 0
        # what the API server holds: each node's own pool, under its shape's drivers
        for i in range(6):
            name = f"{prefix}-{i}"
            node = kube.request("GET", f"/api/v1/nodes/{name}")
            shape = node["metadata"]["labels"][SHAPE_LABEL]
            assert node["metadata"]["labels"][FLEET_LABEL] == prefix
            slices = kube.list_resource_slices(name)
            assert {s["spec"]["pool"]["name"] for s in slices} == {name}
            assert all(
                s["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
                for s in slices
            )
            devices = sum(len(s["spec"].get("devices") or []) for s in slices)
            drivers = sorted({s["spec"]["driver"] for s in slices})
            assert devices == shapes[shape]["devices"]
            assert drivers == shapes[shape]["drivers"]
    finally:
        code, events, err = fleet("delete", "--kubeconfig", kc, "--prefix", prefix)
    assert code == 0, err
    assert by_event(events)["deleted"]["nodes"] == 6
    listed = kube.request(
        "GET", "/api/v1/nodes", query={"labelSelector": f"{FLEET_LABEL}={prefix}"}
    )
    assert listed.get("items") == []
    assert kube.list_resource_slices(f"{prefix}-0") == []


def test_a_node_of_that_name_outside_the_fleet_is_left_alone(
    control_plane: ControlPlane, kube: KubeClient
) -> None:
    prefix = f"fl-{uuid.uuid4().hex[:5]}"
    control_plane.create_node(f"{prefix}-0")
    try:
        code, events, _ = fleet(
            "run",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--nodes",
            "1",
            "--processes",
            "1",
            "--shape",
            EXAMPLE_GPU,
            "--duration",
            "0",
            "--prefix",
            prefix,
        )
        assert code == 1
        error = by_event(events)["error"]["error"]
        assert f"Node {prefix}-0 exists and is not part of fleet" in error
        assert FLEET_LABEL in error
        assert kube.list_resource_slices(f"{prefix}-0") == []
    finally:
        control_plane.delete_node(f"{prefix}-0")
