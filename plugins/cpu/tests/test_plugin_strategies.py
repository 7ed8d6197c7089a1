"""The numa-spread claim shape (the scheduler run lives in tests/e2e/test_cpu_numa_spread.py)."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest

from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.models import NodeInfo
from drakit.strategy_models import SimpleRequest
from drakit_cpu.strategies import NumaSpread

NUMA = "resource.kubernetes.io/numaNode"


def shape(count: int, **kw: Any) -> dict[str, Any]:
    req = SimpleRequest(name="cpus", device_class="cpu.drakit.io", count=count, **kw)
    return NumaSpread().shape(req).to_api()


def test_registered_as_a_strategy() -> None:
    [ep] = metadata.entry_points(group="drakit.strategies", name="numa-spread")
    assert ep.load() is NumaSpread
    host = PluginHost(DrakitSettings(plugins={}), NodeInfo(name="n", sysfs_root="/"))
    req = SimpleRequest(name="cpus", device_class="cpu", count=8)
    assert host.shape("numa-spread", req) == NumaSpread().shape(req)


def test_sixteen_cpus_offer_8_4_2_1_way_splits() -> None:
    spec = shape(16)
    [request] = spec["requests"]
    assert request["name"] == "cpus"
    assert "exactly" not in request
    subs = request["firstAvailable"]
    assert [s["name"] for s in subs] == ["split-8", "split-4", "split-2", "split-1"]
    assert [s["count"] for s in subs] == [8, 4, 2, 1]
    assert [s["capacity"]["requests"]["cpu"] for s in subs] == ["2", "4", "8", "16"]
    for s in subs:
        assert s["deviceClassName"] == "cpu.drakit.io"
        assert s["count"] * int(s["capacity"]["requests"]["cpu"]) == 16  # always even, all N
    assert spec["constraints"] == [
        {"requests": ["cpus/split-8"], "distinctAttribute": NUMA},
        {"requests": ["cpus/split-4"], "distinctAttribute": NUMA},
        {"requests": ["cpus/split-2"], "distinctAttribute": NUMA},
    ]


def test_constraints_name_only_their_subrequest() -> None:
    spec = shape(8)
    names = {f"cpus/{s['name']}" for s in spec["requests"][0]["firstAvailable"]}
    for c in spec["constraints"]:
        assert len(c["requests"]) == 1
        assert c["requests"][0] in names
    # the 1-way fallback is never constrained (one device has one NUMA node anyway)
    assert "cpus/split-1" not in {r for c in spec["constraints"] for r in c["requests"]}


@pytest.mark.parametrize(
    ("count", "widths"),
    [(6, [2, 1]), (12, [4, 2, 1]), (10, [2, 1]), (7, [1]), (3, [1]), (64, [8, 4, 2, 1])],
)
def test_only_even_splits_are_offered(count: int, widths: list[int]) -> None:
    assert NumaSpread().splits(count) == widths


def test_prime_count_is_one_plain_request() -> None:
    spec = shape(7)
    assert spec == {
        "requests": [
            {
                "name": "cpus",
                "exactly": {
                    "deviceClassName": "cpu.drakit.io",
                    "count": 1,
                    "capacity": {"requests": {"cpu": "7"}},
                },
            }
        ]
    }


def test_selectors_and_align_attribute_carry_over() -> None:
    spec = shape(
        4,
        selectors=('device.attributes["cpu.drakit.io"].smt',),
        align_attribute="cpu.drakit.io/socket",
    )
    for s in spec["requests"][0]["firstAvailable"]:
        assert s["selectors"] == [{"cel": {"expression": 'device.attributes["cpu.drakit.io"].smt'}}]
    assert {c["distinctAttribute"] for c in spec["constraints"]} == {"cpu.drakit.io/socket"}


def test_custom_widths() -> None:
    s = NumaSpread(widths=(6, 3))
    assert s.widths == (6, 3, 1)
    assert s.splits(12) == [6, 3, 1]
    with pytest.raises(ValueError, match="positive"):
        NumaSpread(widths=(0,))
    with pytest.raises(ValueError, match="at most 8"):
        NumaSpread(widths=range(2, 12))


def test_the_last_choice_is_unconstrained_unless_required() -> None:
    spec = shape(16)
    constrained = {r for c in spec["constraints"] for r in c["requests"]}
    assert "cpus/split-1" not in constrained
    hard = shape(16, required=True)
    [request] = hard["requests"]
    assert [s["name"] for s in request["firstAvailable"]] == ["split-8", "split-4", "split-2"]
    assert {r for c in hard["constraints"] for r in c["requests"]} == {
        "cpus/split-8",
        "cpus/split-4",
        "cpus/split-2",
    }
    # an odd count has no split to require: one plain request, as without required
    assert shape(7, required=True) == shape(7)
