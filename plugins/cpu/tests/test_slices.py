"""CPU devices rendered into ResourceSlices by drakit.publish.render, on simulated hardware."""

from __future__ import annotations

from typing import Any

from drakit.host.inventory import build_inventory
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host

DRIVER = "cpu.drakit.io"


def slices(profile: str, **cpu: Any) -> list[dict[str, Any]]:
    settings = DrakitSettings(profile=profile, node_name="node-a", plugins={"cpu": cpu})
    with open_host(settings) as host:
        return build_inventory(host).slices()


def test_individual_genoa_splits_into_three_slices_of_128() -> None:
    objs = slices("epyc-genoa-2s", mode="individual")
    assert [len(s["spec"]["devices"]) for s in objs] == [128, 128, 128]
    for s in objs:
        spec = s["spec"]
        assert spec["driver"] == DRIVER
        assert spec["nodeName"] == "node-a"
        assert spec["pool"] == {"name": "node-a", "generation": 0, "resourceSliceCount": 3}
    names = [d["name"] for s in objs for d in s["spec"]["devices"]]
    assert sorted(names, key=lambda n: int(n.split("-")[1])) == [f"cpu-{c}" for c in range(384)]
    dev = objs[0]["spec"]["devices"][0]
    assert dev["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert dev["attributes"]["model"] == {"string": "AMD EPYC 9654 96-Core Processor"}
    assert "capacity" not in dev
    assert "allowMultipleAllocations" not in dev


def test_reserved_cpus_are_not_rendered() -> None:
    objs = slices("epyc-genoa-2s", mode="individual", reserved="0,192")
    assert [len(s["spec"]["devices"]) for s in objs] == [128, 128, 126]
    names = {d["name"] for s in objs for d in s["spec"]["devices"]}
    assert not names & {"cpu-0", "cpu-192"}


def test_grouped_genoa_is_one_slice_with_consumable_capacity() -> None:
    [obj] = slices("epyc-genoa-2s", reserved="0-3")
    devs = {d["name"]: d for d in obj["spec"]["devices"]}
    assert sorted(devs) == ["cpu-numa-0", "cpu-numa-1"]
    assert devs["cpu-numa-0"]["capacity"] == {
        "cpu": {
            "value": "188",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "1"}},
        }
    }
    assert devs["cpu-numa-1"]["capacity"]["cpu"]["value"] == "192"
    assert devs["cpu-numa-0"]["allowMultipleAllocations"] is True
    assert devs["cpu-numa-0"]["attributes"]["cpuCount"] == {"int": 188}
