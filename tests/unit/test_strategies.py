"""Allocation strategies: claim shaping, publish ordering, selection, and how they are found.

Strategies are called through the plugin host (``PluginHost.shape``, ``publish_order``,
``select``), i.e. through pluggy and the installed ``drakit.strategies`` entry points.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from drakit.commands.cli import main
from drakit.errors import PermanentError, PluginLoadError
from drakit.host.inventory import build_inventory
from drakit.host.loader import installed_plugins, installed_strategies
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import Device, NodeInfo
from drakit.strategies import NUMA_ATTRIBUTE, Strategy
from drakit.strategy_models import SelectionRequest, ShapedClaim, SimpleRequest
from drakit_sim_profiles.presets import DEFAULT_BACKENDS as DEFAULT_PLUGINS

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

NODE = NodeInfo(name="node-1", sysfs_root="/nonexistent")
SHIPPED = ("distributed", "numa-preferred", "packed")


def host(extra: dict[str, object] | None = None, **settings: Any) -> PluginHost:
    return PluginHost(DrakitSettings(**settings), NODE, extra_plugins=extra)


def dev(name: str, numa: int | None) -> Device:
    return Device(name=name, attributes={} if numa is None else {NUMA_ATTRIBUTE: numa})


def names(devices: Sequence[Device]) -> list[str]:
    return [d.name for d in devices]


GPUS = SimpleRequest(name="gpus", device_class="gpu.nvidia.com", count=4)


# -- shaping -----------------------------------------------------------------------------------


def test_all_shipped_strategies_are_loaded() -> None:
    assert set(SHIPPED) <= set(host().strategies)


def test_packed_shapes_a_ladder_that_ends_unconstrained() -> None:
    shaped = host().shape("packed", GPUS)
    assert shaped.to_api() == {
        "requests": [
            {
                "name": "gpus",
                "firstAvailable": [
                    {"name": "aligned", "deviceClassName": "gpu.nvidia.com", "count": 4},
                    {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 4},
                ],
            }
        ],
        "constraints": [{"requests": ["gpus/aligned"], "matchAttribute": NUMA_ATTRIBUTE}],
    }


def test_packed_is_hard_only_when_required() -> None:
    shaped = host().shape("packed", GPUS.model_copy(update={"required": True}))
    assert shaped.to_api() == {
        "requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}}
        ],
        "constraints": [{"requests": ["gpus"], "matchAttribute": NUMA_ATTRIBUTE}],
    }


def test_packed_tries_fallback_alignments_before_any() -> None:
    socket = "pairs.composite.drakit.io/socket"
    shaped = host().shape("packed", GPUS.model_copy(update={"fallback_attributes": (socket,)}))
    [request] = shaped.requests
    assert [s["name"] for s in request["firstAvailable"]] == ["aligned", "fallback-1", "any"]
    assert shaped.constraints == (
        {"requests": ["gpus/aligned"], "matchAttribute": NUMA_ATTRIBUTE},
        {"requests": ["gpus/fallback-1"], "matchAttribute": socket},
    )


def test_distributed_prefers_distinct_numa_nodes_and_falls_back() -> None:
    """4 devices on a 2-NUMA node can never be on 4 distinct NUMA nodes: the ladder's last
    choice takes any 4, where a hard distinctAttribute would leave the pod Pending."""
    shaped = host().shape("distributed", GPUS)
    [request] = shaped.requests
    spread, last = request["firstAvailable"]
    assert spread == {"name": "spread", "deviceClassName": "gpu.nvidia.com", "count": 4}
    assert last == {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 4}
    assert shaped.constraints == (
        {"requests": ["gpus/spread"], "distinctAttribute": "resource.kubernetes.io/numaNode"},
    )


def test_distributed_is_hard_only_when_required() -> None:
    shaped = host().shape("distributed", GPUS.model_copy(update={"required": True}))
    assert shaped.constraints == (
        {"requests": ["gpus"], "distinctAttribute": "resource.kubernetes.io/numaNode"},
    )
    assert shaped.requests[0]["exactly"]["count"] == 4


@pytest.mark.parametrize("strategy", SHIPPED)
def test_no_shipped_strategy_constrains_its_last_choice(strategy: str) -> None:
    for count in (2, 4, 8):
        shaped = host().shape(strategy, GPUS.model_copy(update={"count": count}))
        [request] = shaped.requests
        last = request["firstAvailable"][-1]["name"]
        constrained = {r for c in shaped.constraints for r in c["requests"]}
        assert f"gpus/{last}" not in constrained
        assert "gpus" not in constrained


def test_numa_preferred_shapes_first_available_with_an_aligned_first_choice() -> None:
    shaped = host().shape("numa-preferred", GPUS)
    [request] = shaped.requests
    assert request["name"] == "gpus"
    assert "exactly" not in request
    first, last = request["firstAvailable"]
    assert first == {"name": "aligned", "deviceClassName": "gpu.nvidia.com", "count": 4}
    assert last == {"name": "any", "deviceClassName": "gpu.nvidia.com", "count": 4}
    assert len(request["firstAvailable"]) <= 8  # FirstAvailableDeviceRequestMaxSize
    # the constraint names the subrequest, so only the first choice is constrained
    assert shaped.constraints == ({"requests": ["gpus/aligned"], "matchAttribute": NUMA_ATTRIBUTE},)


@pytest.mark.parametrize("strategy", SHIPPED)
def test_one_device_needs_no_constraint(strategy: str) -> None:
    shaped = host().shape(strategy, SimpleRequest(device_class="cpu.drakit.io", count=1))
    assert shaped.constraints == ()
    assert shaped.requests == (
        {"name": "devices", "exactly": {"deviceClassName": "cpu.drakit.io", "count": 1}},
    )


@pytest.mark.parametrize("strategy", SHIPPED)
def test_align_attribute_and_selectors_are_carried(strategy: str) -> None:
    request = SimpleRequest(
        name="pairs",
        device_class="pairs.composite.drakit.io",
        count=2,
        align_attribute="resource.kubernetes.io/pcieRoot",
        selectors=('device.attributes["pairs.composite.drakit.io"].pcieDistance <= 4',),
    )
    api = host().shape(strategy, request).to_api()
    [constraint] = api["constraints"]
    aligned_on = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
    assert aligned_on == "resource.kubernetes.io/pcieRoot"
    text = json.dumps(api)
    assert '"cel": {"expression": "device.attributes[\\"pairs.composite.drakit.io\\"]' in text


def test_unknown_strategy_does_not_shape() -> None:
    with pytest.raises(PermanentError, match=r"strategy 'tight' does not shape requests"):
        host().shape("tight", GPUS)


def test_simple_request_validation() -> None:
    with pytest.raises(ValueError, match="is not a DNS label"):
        SimpleRequest(name="My GPUs", device_class="gpu", count=1)
    with pytest.raises(ValueError, match="must be fully qualified"):
        SimpleRequest(device_class="gpu", count=1, align_attribute="numaNode")
    with pytest.raises(ValueError, match="less than or equal to 128"):
        SimpleRequest(device_class="gpu", count=129)
    with pytest.raises(ValueError, match="must be fully qualified"):
        SimpleRequest(device_class="gpu", count=2, fallback_attributes=("socket",))
    with pytest.raises(ValueError, match="at most 6 items"):
        SimpleRequest(device_class="gpu", count=2, fallback_attributes=("a/b",) * 7)


# -- publish ordering --------------------------------------------------------------------------

MIXED = [dev("a0", 0), dev("b1", 1), dev("c0", 0), dev("d-", None), dev("e1", 1), dev("f0", 0)]


def test_packed_publishes_numa_ordered_stable_devices_without_numa_last() -> None:
    assert names(host().publish_order("packed", MIXED)) == ["a0", "c0", "f0", "b1", "e1", "d-"]


def test_numa_preferred_publishes_like_packed() -> None:
    h = host()
    assert names(h.publish_order("numa-preferred", MIXED)) == names(
        h.publish_order("packed", MIXED)
    )


def test_distributed_interleaves_round_robin_over_numa_nodes() -> None:
    assert names(host().publish_order("distributed", MIXED)) == ["a0", "b1", "d-", "c0", "e1", "f0"]


def test_no_strategy_keeps_discovery_order() -> None:
    assert names(host().publish_order(None, MIXED)) == names(MIXED)


def test_order_must_be_a_permutation() -> None:
    class DropsOne(Strategy):
        name = "lossy"

        def order(self, devices: Sequence[Device]) -> Sequence[Device]:
            return list(devices)[1:]

    h = host(extra={"strategy:lossy": DropsOne()})
    with pytest.raises(PermanentError, match="'lossy' publish order is not a permutation"):
        h.publish_order("lossy", MIXED)


def test_distributed_gpus_interleave_in_the_published_slice() -> None:
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic", plugins={"nvidia_gpu": {"strategy": "distributed"}}
    )
    with open_host(settings) as h:
        [s] = build_inventory(h).slices()
    devices = s["spec"]["devices"]
    numa = [d["attributes"][NUMA_ATTRIBUTE]["int"] for d in devices]
    assert numa == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in (0, 4, 1, 5, 2, 6, 3, 7)]


def test_publish_strategy_applies_to_every_plugin() -> None:
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic",
        plugins={"nvidia_gpu": {}, "amd_ainic": {}},
        publish_strategy="distributed",
    )
    with open_host(settings) as h:
        assert {c.strategy for c in h.contexts.values()} == {"distributed"}
        slices = build_inventory(h).slices()
    for s in slices:
        numa = [d["attributes"][NUMA_ATTRIBUTE]["int"] for d in s["spec"]["devices"]]
        assert numa == [0, 1] * 4, s["spec"]["driver"]


# -- selection ---------------------------------------------------------------------------------


def test_selection_without_a_handler_is_an_error() -> None:
    request = SelectionRequest(kind="fpga-lanes", count=1, available=frozenset({1, 2}))
    with pytest.raises(PermanentError, match="no strategy 'packed' for selecting fpga-lanes"):
        host().select("packed", request)


def test_a_new_strategy_can_select_without_touching_a_backend() -> None:
    class LowestFirst(Strategy):
        name = "lowest"

        def select(self, request: SelectionRequest) -> Any:
            from drakit.strategy_models import SelectionResult

            return SelectionResult(units=frozenset(sorted(request.available)[: request.count]))

    h = host(extra={"strategy:lowest": LowestFirst()})
    request = SelectionRequest(kind="anything", count=2, available=frozenset({9, 3, 5}))
    assert h.select("lowest", request).units == frozenset({3, 5})
    assert isinstance(h.shape("packed", GPUS), ShapedClaim)  # the others still answer


# -- configuration -----------------------------------------------------------------------------


def test_configured_strategy_not_installed_stops_start_up() -> None:
    with pytest.raises(PluginLoadError) as exc:
        host(plugins={"example_fpga": {"strategy": "tight"}})
    assert exc.value.plugin == "tight"
    assert "strategy not installed" in str(exc.value)
    for name in (*SHIPPED, "reverse"):
        assert name in str(exc.value)


def test_publish_strategy_not_installed_stops_start_up() -> None:
    with pytest.raises(PluginLoadError, match="strategy not installed"):
        host(plugins={"example_fpga": {}}, publish_strategy="tight")


def test_plugins_command_lists_backends_and_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plugins", "-o", "json"])
    rows = json.loads(capsys.readouterr().out)
    backends = {r["name"]: r for r in rows if r["kind"] == "backend"}
    strategies = {r["name"]: r for r in rows if r["kind"] == "strategy"}
    # every installed entry point is listed: at least the four backends, core's three
    # strategies and the fixture's (backends may ship strategies of their own)
    assert set(backends) == {e.name for e in installed_plugins()}
    assert set(strategies) == {e.name for e in installed_strategies()}
    assert {*DEFAULT_PLUGINS, "example_fpga"} <= set(backends)
    assert {*SHIPPED, "reverse"} <= set(strategies)
    # nothing configured: the default backends are enabled, in their documented order
    assert [backends[n]["state"] for n in DEFAULT_PLUGINS] == [
        f"enabled ({i})" for i in range(1, len(DEFAULT_PLUGINS) + 1)
    ]
    assert backends["example_fpga"]["state"] == "installed"
    assert backends["example_fpga"]["distribution"] == "drakit-example-thirdparty"
    assert {strategies[n]["distribution"] for n in SHIPPED} == {"drakit"}
    assert strategies["reverse"]["target"] == "drakit_example_thirdparty:ReverseOrder"
    assert {r["group"] for r in rows} == {"drakit.plugins", "drakit.strategies"}


def test_plugins_command_shows_the_configured_selection(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "drakit.yaml"
    config.write_text(
        "publish_strategy: packed\nplugins:\n  example_fpga:\n    strategy: reverse\n  cpu: {}\n",
        encoding="utf-8",
    )
    main(["plugins", "--config", str(config), "-o", "json"])
    rows = {r["name"]: r["state"] for r in json.loads(capsys.readouterr().out)}
    assert rows["example_fpga"] == "enabled (1)"
    assert rows["cpu"] == "enabled (2)"
    assert rows["nvidia_gpu"] == "installed"
    assert (rows["reverse"], rows["packed"], rows["distributed"]) == (
        "selected",
        "selected",
        "available",
    )
