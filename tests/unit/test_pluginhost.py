"""The plugin host: loading by configuration, contract checks, discovery merging and routing.

Plugins are real: the installed backends, the third-party fixture distribution
(``drakit-example-thirdparty``), throwaway distributions installed for one test
(``entry_points`` fixture) and small classes registered through ``extra_plugins``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from tests.clirun import run_cli_process

from drakit import hookimpl
from drakit.commands.cli import main
from drakit.errors import ConfigInvalid, PermanentError, PluginLoadError
from drakit.host.inventory import Inventory, build_inventory
from drakit.host.loader import installed_plugins
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.models import (
    AllocatedDevice,
    CdiDeviceNode,
    ClaimInfo,
    Device,
    DeviceHealth,
    DeviceKey,
    NodeInfo,
    PreparedDevice,
)
from drakit_cpu.config import CpuConfig
from drakit_cpu.plugin import CpuPlugin

if TYPE_CHECKING:
    from tests.conftest import EntryPoints

pytestmark = pytest.mark.usefixtures("clean_drakit_env")

NODE = NodeInfo(name="node-1", sysfs_root="/nonexistent")
FPGA = "fpga.example.com"


def make_host(
    plugins: Mapping[str, Mapping[str, Any]],
    *,
    extra: Mapping[str, object] | None = None,
    node: NodeInfo = NODE,
    **settings: Any,
) -> PluginHost:
    return PluginHost(
        DrakitSettings(plugins={k: dict(v) for k, v in plugins.items()}, **settings),
        node,
        extra_plugins=extra,
    )


def fpga_key(name: str) -> DeviceKey:
    return DeviceKey(driver=FPGA, pool=NODE.name, device=name)


def claim_for(*devices: str, driver: str = FPGA) -> ClaimInfo:
    return ClaimInfo(
        namespace="default",
        name="c",
        uid="uid-1",
        devices=tuple(
            AllocatedDevice(request="r", driver=driver, pool=NODE.name, device=d) for d in devices
        ),
    )


# -- test plugins (small, real hook implementations) --------------------------------------------


class RackLabel:
    """An enrichment plugin: adds the node's rack to every device, whoever owns it."""

    def __init__(self, rack: str) -> None:
        self.rack = rack

    @hookimpl
    def drakit_enrich_devices(
        self, devices: Mapping[DeviceKey, Device]
    ) -> dict[DeviceKey, dict[str, str]]:
        """``example.com/rack`` on every device."""
        return {key: {"example.com/rack": self.rack} for key in devices}


class SetAttribute:
    """An enrichment plugin that sets one attribute on one device."""

    def __init__(self, key: DeviceKey, name: str, value: int | str) -> None:
        self.key, self.name, self.value = key, name, value

    @hookimpl
    def drakit_enrich_devices(self) -> dict[DeviceKey, dict[str, int | str]]:
        return {self.key: {self.name: self.value}}


class PrepareSpy:
    """Records the prepare and unprepare calls it receives."""

    def __init__(self) -> None:
        self.prepared: list[ClaimInfo] = []
        self.unprepared: list[str] = []

    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        self.prepared.append(claim)
        return [
            PreparedDevice(request=d.request, pool=d.pool, device=d.device) for d in claim.devices
        ]

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid: str) -> bool:
        self.unprepared.append(claim_uid)
        return True


class Raises:
    @hookimpl
    def drakit_prepare_devices(self, claim: ClaimInfo) -> list[PreparedDevice]:
        raise KeyError("no such card")


class WrongArgumentName:
    @hookimpl
    def drakit_discover_devices(self, nod: NodeInfo) -> None:
        return None


class UnknownHook:
    @hookimpl
    def drakit_discover_device(self, node: NodeInfo) -> None:
        return None


BACKEND_TEMPLATE = """
from typing import ClassVar
from drakit import PluginSettings, hookimpl
from drakit.models import Device, DeviceInventory

class Plugin:
    settings_model: ClassVar[type[PluginSettings]] = PluginSettings
    default_driver: ClassVar[str] = {driver!r}

    def __init__(self, context):
        self.context = context

    @hookimpl
    def drakit_discover_devices(self, node):
{body}
"""


def backend_source(body: str, driver: str = FPGA) -> str:
    """A throwaway backend whose discovery runs ``body`` (indented 8 spaces)."""
    indented = "\n".join(f"        {line}" for line in body.strip().splitlines())
    return BACKEND_TEMPLATE.format(driver=driver, body=indented)


# -- loading -----------------------------------------------------------------------------------


def test_loads_exactly_the_configured_plugins_in_order() -> None:
    host = make_host({"example_fpga": {"count": 1}, "cpu": {}})
    assert list(host.backends) == ["example_fpga", "cpu"]
    # the third-party class is only reached through its entry point, never imported here
    assert type(host.backends["example_fpga"]).__name__ == "ExampleFpgaPlugin"
    assert isinstance(host.backends["cpu"], CpuPlugin)
    registered = [name for name, _ in host.pm.list_name_plugin()]
    assert registered[:2] == ["example_fpga", "cpu"]
    assert not {"nvidia_gpu", "amd_ainic", "composite"} & set(registered)
    assert host.driver_names() == {"example_fpga": FPGA, "cpu": "cpu.drakit.io"}
    assert host.hook_implementations("example_fpga") == [
        "drakit_device_health",
        "drakit_discover_devices",
        "drakit_prepare_devices",
    ]


def test_no_plugins_configured_loads_none() -> None:
    host = make_host({})
    assert host.backends == {}
    assert host.discover().devices == {}


def test_sections_are_validated_into_the_plugins_model() -> None:
    host = make_host({"example_fpga": {"count": 5, "driver": "cards.example.org"}})
    ctx = host.contexts["example_fpga"]
    assert type(ctx.settings).__name__ == "ExampleFpgaSettings"
    assert ctx.settings.model_dump() == {
        "driver": "cards.example.org",
        "strategy": None,
        "count": 5,
        "unhealthy": [],
    }
    assert ctx.driver_name == "cards.example.org"
    assert ctx.name == "example_fpga"
    assert ctx.node == NODE
    assert ctx.log.name == "drakit.plugin.example_fpga"


def test_section_errors_name_the_path() -> None:
    with pytest.raises(ConfigInvalid) as exc:
        make_host({"example_fpga": {"count": "many", "colour": "red"}})
    assert sorted(p for p, _ in exc.value.errors) == [
        "plugins.example_fpga.colour",
        "plugins.example_fpga.count",
    ]


def test_plugin_not_installed_is_one_line_naming_it_and_the_installed_ones() -> None:
    with pytest.raises(PluginLoadError) as exc:
        make_host({"example_fpga": {}, "tpu": {}})
    assert exc.value.plugin == "tpu"
    text = str(exc.value)
    assert "\n" not in text
    assert "not installed" in text
    for entry in installed_plugins():
        assert entry.name in text


def test_plugin_whose_import_fails_is_named(entry_points: EntryPoints) -> None:
    entry_points.install("drakit.plugins", "broken", "raise ImportError('libfpga.so.3 missing')\n")
    with pytest.raises(PluginLoadError) as exc:
        make_host({"broken": {}})
    assert exc.value.plugin == "broken"
    assert "failed to import" in str(exc.value)
    assert "libfpga.so.3 missing" in str(exc.value)


def test_plugin_whose_constructor_fails_is_named(entry_points: EntryPoints) -> None:
    entry_points.install(
        "drakit.plugins",
        "grumpy",
        """
        from drakit import PluginSettings
        class Plugin:
            settings_model = PluginSettings
            default_driver = "grumpy.example.com"
            def __init__(self, context):
                raise RuntimeError("no licence")
        """,
    )
    with pytest.raises(PluginLoadError) as exc:
        make_host({"grumpy": {}})
    assert exc.value.plugin == "grumpy"
    assert "failed to start" in str(exc.value)
    assert "no licence" in str(exc.value)


@pytest.mark.parametrize(
    ("name", "impl", "named"),
    [
        pytest.param(
            "misspelt",
            WrongArgumentName,
            ["does not match the hook contract", "nod"],
            id="a wrong argument name",
        ),
        pytest.param("typo", UnknownHook, ["drakit_discover_device"], id="an unknown hook"),
    ],
)
def test_a_bad_hookimpl_is_refused_naming_the_registered_plugin(
    name: str, impl: type, named: list[str]
) -> None:
    with pytest.raises(PluginLoadError) as exc:
        make_host({}, extra={name: impl()})
    assert exc.value.plugin == name
    for text in named:
        assert text in str(exc.value)


# -- the third-party distribution: configuration alone ------------------------------------------


def test_third_party_plugin_is_discovered_and_published_by_configuration_alone() -> None:
    [entry] = [e for e in installed_plugins() if e.name == "example_fpga"]
    assert entry.distribution == "drakit-example-thirdparty"

    host = make_host({"example_fpga": {"count": 3}})
    inv = build_inventory(host)
    assert [(k.device, owner) for k, owner, _ in inv.devices()] == [
        ("fpga-0", "example_fpga"),
        ("fpga-1", "example_fpga"),
        ("fpga-2", "example_fpga"),
    ]
    [slice_] = inv.slices()
    spec = slice_["spec"]
    assert spec["driver"] == FPGA
    assert spec["nodeName"] == NODE.name
    assert spec["devices"][1] == {
        "name": "fpga-1",
        "attributes": {"family": {"string": "example"}, "slot": {"int": 1}},
        "capacity": {"luts": {"value": "1200k"}},
    }


def test_third_party_strategy_reorders_publishing() -> None:
    host = make_host({"example_fpga": {"count": 3, "strategy": "reverse"}})
    assert "reverse" in host.strategies
    [slice_] = build_inventory(host).slices()
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["fpga-2", "fpga-1", "fpga-0"]


def test_third_party_plugin_next_to_the_shipped_ones_on_a_profile() -> None:
    settings = DrakitSettings(
        profile="minimal-1s",
        plugins={"cpu": {}, "example_fpga": {"count": 2}},
    )
    with open_host(settings) as host:
        slices = build_inventory(host).slices()
    drivers = {s["spec"]["driver"]: len(s["spec"]["devices"]) for s in slices}
    assert drivers == {"cpu.drakit.io": 1, FPGA: 2}
    assert {s["spec"]["nodeName"] for s in slices} == {"minimal-1s"}


def test_third_party_prepare_is_routed_to_it() -> None:
    host = make_host({"example_fpga": {"count": 2}})
    owner = build_inventory(host).owner_of(fpga_key("fpga-1"))
    assert owner == "example_fpga"
    [prepared] = host.prepare(owner, claim_for("fpga-1"))
    assert prepared.device == "fpga-1"
    # it returns a dict; the typed model is what core gets
    assert prepared.edits.device_nodes == (CdiDeviceNode(path="/dev/fpga-1"),)


# -- discovery merging -------------------------------------------------------------------------


def test_enrichment_adds_attributes_to_other_plugins_devices() -> None:
    host = make_host({"example_fpga": {"count": 2}}, extra={"rack": RackLabel("r7")})
    disc = host.discover()
    for key in (fpga_key("fpga-0"), fpga_key("fpga-1")):
        assert disc.devices[key].attributes["example.com/rack"].value == "r7"
        assert disc.owners[key] == "example_fpga"  # enrichment does not change ownership


def test_enrichment_agreeing_with_the_owner_is_accepted() -> None:
    same = SetAttribute(fpga_key("fpga-0"), "slot", 0)
    disc = make_host({"example_fpga": {}}, extra={"same": same}).discover()
    assert disc.devices[fpga_key("fpga-0")].attributes["slot"].value == 0


@pytest.mark.parametrize(
    ("plugins", "extra", "named"),
    [
        pytest.param(
            {"example_fpga": {"count": 1}},
            {"rack-a": RackLabel("r1"), "rack-b": RackLabel("r2")},
            ["'rack-a'", "'rack-b'", "example.com/rack", "fpga-0"],
            id="two enrichments conflict",
        ),
        pytest.param(
            {"example_fpga": {}},
            {"liar": SetAttribute(fpga_key("fpga-0"), "slot", 9)},
            ["'liar'", "'example_fpga'"],
            id="an enrichment overwrites the owner's attribute",
        ),
    ],
)
def test_conflicting_enrichment_is_refused_naming_both_plugins(
    plugins: dict[str, dict[str, Any]], extra: dict[str, object], named: list[str]
) -> None:
    host = make_host(plugins, extra=extra)
    with pytest.raises(PermanentError) as exc:
        host.discover()
    for text in named:
        assert text in str(exc.value)


def test_enrichment_of_an_unknown_device_is_refused() -> None:
    ghost = SetAttribute(fpga_key("fpga-99"), "x", 1)
    with pytest.raises(PermanentError, match="'ghost' enriched unknown device"):
        make_host({"example_fpga": {}}, extra={"ghost": ghost}).discover()


def test_duplicate_device_names_in_one_pool_name_both_plugins(entry_points: EntryPoints) -> None:
    entry_points.install(
        "drakit.plugins",
        "fpga_clone",
        backend_source('return DeviceInventory(devices=(Device(name="fpga-0"),))'),
    )
    host = make_host({"example_fpga": {"count": 1}, "fpga_clone": {}})
    with pytest.raises(PermanentError) as exc:
        host.discover()
    text = str(exc.value)
    assert "fpga.example.com/node-1/fpga-0" in text
    assert "'example_fpga'" in text
    assert "'fpga_clone'" in text


def test_same_device_name_under_another_driver_is_fine(entry_points: EntryPoints) -> None:
    entry_points.install(
        "drakit.plugins",
        "fpga_clone",
        backend_source('return DeviceInventory(devices=(Device(name="fpga-0"),))'),
    )
    host = make_host({"example_fpga": {"count": 1}, "fpga_clone": {"driver": "clone.example.com"}})
    assert sorted(str(k) for k in host.discover().devices) == [
        "clone.example.com/node-1/fpga-0",
        "fpga.example.com/node-1/fpga-0",
    ]


def test_discovery_returning_the_wrong_type_names_the_plugin(entry_points: EntryPoints) -> None:
    entry_points.install(
        "drakit.plugins", "sloppy", backend_source('return [Device(name="fpga-0")]')
    )
    with pytest.raises(PermanentError, match=r"plugin 'sloppy' returned list from discovery"):
        make_host({"sloppy": {}}).discover()


def test_discovery_failure_names_the_plugin(entry_points: EntryPoints) -> None:
    entry_points.install(
        "drakit.plugins", "boom", backend_source('raise OSError("sensor on fire")')
    )
    with pytest.raises(PermanentError) as exc:
        make_host({"example_fpga": {}, "boom": {}}).discover()
    assert "plugin 'boom' failed in drakit_discover_devices" in str(exc.value)
    assert "sensor on fire" in str(exc.value)


def test_a_node_serves_the_other_backends_when_one_cannot_discover(
    entry_points: EntryPoints, drakit_node: Any
) -> None:
    """Issue 30, class 3: one backend failing at start is skipped, named, Unready; not fatal."""
    entry_points.install(
        "drakit.plugins", "boom", backend_source('raise OSError("sensor on fire")')
    )
    running = drakit_node({"plugins": {"cpu": {}, "boom": {}}})
    inv = running.node.inventory
    assert inv is not None
    assert "boom" in inv.failed
    assert "sensor on fire" in inv.failed["boom"]
    assert inv.devices_of("cpu.drakit.io"), "the healthy backend is still discovered"
    ready, why = running.node.ready()
    assert not ready
    assert why.startswith("backends not started (the others are served): boom: ")
    assert "sensor on fire" in why
    errors = running.node.metrics.plugin_errors.labels(
        plugin="boom", hook="drakit_discover_devices"
    )
    assert errors._value.get() >= 1
    assert "cpu.drakit.io" in running.node.states  # its kubelet service runs


def test_a_backend_that_had_devices_and_then_fails_keeps_the_round_failing(
    entry_points: EntryPoints, tmp_path: Path
) -> None:
    """Only a backend with no devices yet is skipped: one that had them keeps them published."""
    flag = tmp_path / "fail"
    entry_points.install(
        "drakit.plugins",
        "flaky",
        backend_source(
            f"import pathlib\nif pathlib.Path({str(flag)!r}).exists():\n"
            "    raise OSError('flaked')\n"
            "return DeviceInventory(devices=(Device(name='fpga-0'),))"
        ),
    )
    inventory = Inventory(make_host({"flaky": {}}), isolate=True)
    first = inventory.refresh()
    assert not first.failed
    flag.write_text("")
    with pytest.raises(PermanentError, match="flaked"):
        inventory.refresh()
    assert inventory.current is first


def _boom_config(entry_points: EntryPoints, tmp_path: Path) -> Path:
    entry_points.install(
        "drakit.plugins", "boom", backend_source('raise OSError("sensor on fire")')
    )
    config = tmp_path / "drakit.yaml"
    config.write_text(yaml.safe_dump({"plugins": {"boom": {}}}), encoding="utf-8")
    return config


def test_cli_reports_a_failing_discovery_in_one_line_exit_2(
    entry_points: EntryPoints, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _boom_config(entry_points, tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["discover", "--config", str(config), "--profile", "minimal-1s", "-o", "json"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        "drakit: error: plugin 'boom' failed in drakit_discover_devices: OSError('sensor on fire')"
    )


def test_cli_process_prints_no_traceback_for_a_failing_discovery(
    entry_points: EntryPoints, tmp_path: Path
) -> None:
    config = _boom_config(entry_points, tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(entry_points.site), *sys.path])}
    proc = run_cli_process(
        ["discover", "--config", str(config), "--profile", "minimal-1s"], env=env
    )
    assert proc.returncode == 2
    assert "plugin 'boom' failed in drakit_discover_devices" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- claims: routing -----------------------------------------------------------------------------


def test_prepare_calls_only_the_owning_plugin() -> None:
    a, b = PrepareSpy(), PrepareSpy()
    host = make_host({"example_fpga": {"count": 1}}, extra={"spy-a": a, "spy-b": b})
    claim = claim_for("fpga-0")
    owner = build_inventory(host).owner_of(fpga_key("fpga-0"))
    assert owner == "example_fpga"
    host.prepare(owner, claim)
    assert (a.prepared, b.prepared) == ([], [])

    [prepared] = host.prepare("spy-b", claim)
    assert prepared.device == "fpga-0"
    assert (len(a.prepared), len(b.prepared)) == (0, 1)

    host.unprepare("spy-a", "uid-1", [prepared])
    assert (a.unprepared, b.unprepared) == (["uid-1"], [])


def test_prepare_hook_failure_names_the_plugin() -> None:
    host = make_host({}, extra={"flaky": Raises(), "spy": PrepareSpy()})
    with pytest.raises(PermanentError, match="plugin 'flaky' failed in drakit_prepare_devices"):
        host.prepare("flaky", claim_for("fpga-0"))


def test_prepare_without_an_implementation_is_an_error() -> None:
    host = make_host({}, extra={"rack": RackLabel("r1")})
    with pytest.raises(PermanentError, match="does not implement drakit_prepare_devices"):
        host.prepare("rack", claim_for("fpga-0"))


def test_parse_config_asks_only_the_plugins_of_that_driver() -> None:
    host = make_host({"cpu": {}, "example_fpga": {}})
    params = {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "spread"}
    parsed = host.parse_config("cpu.drakit.io", params)
    assert isinstance(parsed, CpuConfig)
    assert parsed.policy == "spread"
    with pytest.raises(ConfigInvalid) as exc:
        host.parse_config(FPGA, params)
    assert "no plugin of driver 'fpga.example.com' owns cpu.drakit.io/v1alpha1/CpuConfig" in str(
        exc.value
    )


def test_parse_config_errors_name_the_field() -> None:
    host = make_host({"cpu": {}})
    with pytest.raises(ConfigInvalid) as exc:
        host.parse_config(
            "cpu.drakit.io",
            {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig", "policy": "tight"},
        )
    assert [p for p, _ in exc.value.errors] == ["policy"]


# A backend with only a health hook (quoted in docs/hooks.md).
FAN_WATCH = """
from datetime import datetime, timezone
from typing import ClassVar

from drakit import PluginContext, PluginSettings, hookimpl
from drakit.models import DeviceHealth, NodeInfo


class Plugin:
    settings_model: ClassVar[type[PluginSettings]] = PluginSettings
    default_driver: ClassVar[str] = "fpga.example.com"

    def __init__(self, context: PluginContext) -> None:
        self.context = context

    @hookimpl
    def drakit_device_health(self, node: NodeInfo) -> list[DeviceHealth]:
        return [
            DeviceHealth(
                pool=node.name,
                device="fpga-0",
                health="Unhealthy",
                message="fan stalled",
                last_updated=datetime.now(timezone.utc),
            )
        ]
"""


def test_health_is_collected_per_backend(entry_points: EntryPoints) -> None:
    entry_points.install("drakit.plugins", "watched", FAN_WATCH)
    health = make_host({"example_fpga": {"count": 1}, "watched": {}}).health()
    assert list(health) == ["example_fpga", "watched"]
    assert [(h.device, h.health) for h in health["example_fpga"]] == [("fpga-0", "Healthy")]
    [report] = health["watched"]
    assert isinstance(report, DeviceHealth)
    assert (report.device, report.health, report.message) == ("fpga-0", "Unhealthy", "fan stalled")


def test_hosts_are_independent() -> None:
    first = make_host({"example_fpga": {"count": 1}}, extra={"rack": RackLabel("r1")})
    second = make_host({"example_fpga": {"count": 1}})
    assert "example.com/rack" not in second.discover().devices[fpga_key("fpga-0")].attributes
    assert "example.com/rack" in first.discover().devices[fpga_key("fpga-0")].attributes
