"""``drakit.testing.allocate``: the scheduler's allocation over a simulated node's slices.

A backend's strategy or partition test uses it instead of shelling out to ``drakit explain``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drakit.errors import ConfigInvalid
from drakit.sim import get_profile
from drakit.testing import Allocation, allocate, build_sim_node, open_host
from drakit_nvidia_gpu.sim import with_mig_enabled

GPU = "gpu.nvidia.drakit.io"


def claim(name: str, count: int = 1, cel: str = "", **more: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": count, **more}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


@pytest.fixture(scope="module")
def slices(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """An H100 node whose GPU 0 is in MIG mode: full GPUs and MIG slices share counters."""
    root = tmp_path_factory.mktemp("alloc")
    node = build_sim_node(with_mig_enabled(get_profile("dgx-h100"), {0}), root, node_name="n1")
    host = open_host({"plugins": {"nvidia_gpu": {}}}, node)
    try:
        return host.slices()
    finally:
        host.close()


def test_claims_that_fit_get_devices(slices: list[dict[str, Any]]) -> None:
    out = allocate([claim("two", 2, f'device.attributes["{GPU}"].type == "gpu"')], slices)
    assert isinstance(out, Allocation)
    assert (out.node, out.fits) == ("n1", True)
    assert len(out.devices("default/two")) == 2
    [first, _] = out.results["default/two"]
    assert (first["driver"], first["pool"], first["request"]) == (GPU, "n1", "gpu")


def test_a_gpu_and_a_mig_slice_of_it_never_go_together(slices: list[dict[str, Any]]) -> None:
    [uuid] = [
        d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"].get("devices", [])
        if d["name"] == "gpu-0"
    ]
    attr = f'device.attributes["{GPU}"]'
    whole = claim("whole", cel=f'{attr}.type == "gpu" && {attr}.uuid == "{uuid}"')
    part = claim("part", cel=f'{attr}.type == "mig" && {attr}.parentUUID == "{uuid}"')
    assert allocate([whole], slices).fits
    assert allocate([part], slices).fits
    both = allocate([whole, part], slices)
    assert not both.fits
    assert both.results == {}
    assert both.reasons == {"default/whole": [], "default/part": []}  # each fits alone

    held = allocate([whole], slices)
    taken = {
        **whole,
        "status": {"allocation": {"devices": {"results": held.results["default/whole"]}}},
    }
    after = allocate([part], slices, allocated=[taken])
    assert not after.fits
    kinds = {r["kind"] for r in after.reasons["default/part"]}
    assert kinds & {"counter", "count"}, after.reasons


def test_reasons_say_why_a_claim_does_not_fit(slices: list[dict[str, Any]]) -> None:
    out = allocate([claim("many", 9, f'device.attributes["{GPU}"].type == "gpu"')], slices)
    assert not out.fits
    [reason, *_] = out.reasons["default/many"]
    assert reason["kind"] == "count"
    assert "needs 9 devices" in reason["message"]


def test_bad_input_names_the_object_and_the_field(slices: list[dict[str, Any]]) -> None:
    with pytest.raises(ConfigInvalid, match="bad"):
        allocate([{"metadata": {"name": "bad"}, "spec": {"devices": 7}}], slices)
    with pytest.raises(ValueError, match="pass node="):
        allocate([claim("x")], [])


def test_a_node_can_be_named(tmp_path: Path, slices: list[dict[str, Any]]) -> None:
    assert allocate([claim("one")], slices, node="n1").fits
    assert not allocate([claim("one")], slices, node="elsewhere").fits
