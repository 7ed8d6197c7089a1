"""``SimHost.published()`` / ``RunningNode.published()``: devices, counter sets and taints as a
node publishes them, without parsing slices or drakit's internal inventory types."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drakit.sim import get_profile
from drakit.testing import Published, build_sim_node, open_host, run_node
from drakit_nvidia_gpu.sim import inject_xid, with_mig_enabled

GPU = "gpu.nvidia.drakit.io"


def test_devices_and_counter_sets_of_a_partitioned_gpu(tmp_path: Path) -> None:
    node = build_sim_node(with_mig_enabled(get_profile("dgx-h100"), {0}), tmp_path, node_name="n1")
    with open_host({"plugins": {"nvidia_gpu": {"health_watch": False}}}, node) as host:
        published = host.published()
    assert isinstance(published, Published)
    whole = published.device("gpu-0")
    assert (whole.driver, whole.pool, whole.attribute("type")) == (GPU, "n1", "gpu")
    [draw] = whole.consumes_counters
    counters = published.counter_sets[(GPU, "n1", draw["counterSet"])]
    assert counters  # the GPU's slices and memory, as the partitions draw on them
    assert {n: c["value"] for n, c in draw["counters"].items()} == counters  # the whole of it
    part = next(d for d in published.devices if d.attribute("type") == "mig")
    assert part.attribute("parentUUID") == whole.attribute("uuid")
    assert [c["counterSet"] for c in part.consumes_counters] == [draw["counterSet"]]
    assert published.tainted() == {}
    with pytest.raises(KeyError, match="0 published devices named 'gpu-99'"):
        published.device("gpu-99")


def test_health_taints_are_in_the_running_nodes_view(tmp_path: Path) -> None:
    node = build_sim_node("dgx-h100", tmp_path / "root", node_name="n1")
    config = {
        "plugins": {"nvidia_gpu": {"health_clear_after": 60}},
        "health": {"interval": 0.2, "taint_unhealthy": True},
    }
    with run_node(config, node, state_dir=tmp_path / "state") as running:
        uuid = running.published().device("gpu-3").attribute("uuid")
        inject_xid(node.root, uuid, 79)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the XID taint may show a round before the other
            tainted = running.published().tainted()
            if "drakit.io/unhealthy" in {t["key"] for t in tainted.get("gpu-3", ())}:
                break
            time.sleep(0.2)
        assert set(tainted) == {"gpu-3"}, tainted
        keys = {t["key"] for t in tainted["gpu-3"]}
        assert "drakit.io/unhealthy" in keys
