"""The simulated fleet's shapes (``drakit.node.fleet``) and its command's bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drakit.node.fleet import EXAMPLE_GPU, assign_shapes, example_gpu_shape, load_shape
from drakit.publish.render import render_pool

DRAKIT = str(Path(sys.executable).with_name("drakit"))


def test_the_example_shape_is_the_go_example_drivers_gpu_profile() -> None:
    shape = example_gpu_shape()
    (pool,) = shape.for_node("n1")
    (obj,) = render_pool(pool)
    spec = obj["spec"]
    assert spec["driver"] == "gpu.example.com"
    assert spec["nodeName"] == "n1"
    assert spec["pool"]["name"] == "n1"
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    first = spec["devices"][0]
    assert set(first["attributes"]) == {"index", "uuid", "model", "driverVersion"}
    assert first["attributes"]["driverVersion"] == {"version": "1.0.0"}
    assert first["capacity"] == {"memory": {"value": "80Gi"}, "compute": {"value": "100"}}
    assert "sharedCounters" not in spec


def test_every_node_publishes_its_own_pool_and_shares_the_devices() -> None:
    shape = load_shape("minimal-1s")
    a, b = shape.for_node("a"), shape.for_node("b")
    assert {p.node for p in a} == {"a"}
    assert {p.pool for p in b} == {"b"}
    assert all(x.devices is y.devices for x, y in zip(a, b, strict=True))  # nothing copied
    assert shape.devices == sum(len(p.devices) for p in a) > 0


def test_shapes_are_taken_in_turn() -> None:
    got = assign_shapes(["n0", "n1", "n2"], ["x", "y"])
    assert got == [("n0", "x"), ("n1", "y"), ("n2", "x")]
    with pytest.raises(ValueError, match="at least one shape"):
        assign_shapes(["n0"], [])


def test_an_unknown_profile_is_named_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="nope") as info:
        load_shape("nope")
    assert "minimal-1s" in str(info.value)
    assert load_shape(EXAMPLE_GPU).devices == 8


def test_the_command_reports_a_bad_shape_and_fails(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    done = subprocess.run(
        [
            DRAKIT,
            "fleet",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--nodes",
            "2",
            "--processes",
            "2",
            "--shape",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    errors = [json.loads(x) for x in done.stdout.splitlines() if '"error"' in x]
    assert errors, done.stdout + done.stderr
    assert "nope" in errors[0]["error"]
