"""The contract every installed plugin must meet, checked against the bare hook specs.

Parametrised over what is installed (``drakit.plugins`` and ``drakit.strategies`` entry
points), so a vendor distribution installed next to drakit is checked without any change here.
Each plugin is built by hand with a :class:`~drakit.context.PluginContext` and registered with
a pluggy manager that knows only :mod:`drakit.hookspecs`, i.e. without the plugin host.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy
import pytest

from drakit import hookspecs
from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.models import Device, DeviceInventory, DeviceKey, NodeInfo
from drakit.sim import vendor_libraries
from drakit.slices import check_driver_name, render_slices
from drakit.strategies import Strategy
from drakit.strategy_models import SelectionRequest, SelectionResult

PROFILE = "h200-8gpu-8ainic"
BACKENDS = sorted(metadata.entry_points(group="drakit.plugins"), key=lambda e: e.name)
STRATEGIES = sorted(metadata.entry_points(group="drakit.strategies"), key=lambda e: e.name)


def _ids(eps: list[metadata.EntryPoint]) -> list[str]:
    return [e.name for e in eps]


# The contract is checked against the specs alone, so this test builds its own manager
# instead of going through drakit.pluginhost (the one place production code builds one).
def new_manager() -> pluggy.PluginManager:  # noqa: TID251
    """A manager that knows only drakit's hook specs."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)  # noqa: TID251
    pm.add_hookspecs(hookspecs)
    return pm


def no_selection(strategy: str, request: SelectionRequest) -> SelectionResult:
    raise PermanentError(f"no strategy {strategy!r} in the contract test")


@pytest.fixture(scope="module")
def node(profile_root: Callable[[str], Path]) -> NodeInfo:
    return NodeInfo(name=PROFILE, sysfs_root=str(profile_root(PROFILE)))


def build(ep: metadata.EntryPoint, node: NodeInfo) -> tuple[Any, PluginContext]:
    cls = ep.load()
    ctx = PluginContext(
        name=ep.name,
        settings=cls.settings_model.model_validate({}),
        node=node,
        driver_name=cls.default_driver,
        strategy=None,
        select=no_selection,
        log=logging.getLogger(f"drakit.plugin.{ep.name}"),
        # what drakit.runtime hands backends on a simulated root (the fake NVML)
        libraries=vendor_libraries(Path(node.sysfs_root)),
    )
    return cls(ctx), ctx


@pytest.fixture(scope="module")
def discovered(node: NodeInfo) -> dict[str, tuple[str, DeviceInventory | None]]:
    """Plugin name -> (driver, what its discovery returned) on ``PROFILE``."""
    out: dict[str, tuple[str, DeviceInventory | None]] = {}
    for ep in BACKENDS:
        obj, ctx = build(ep, node)
        pm = new_manager()
        pm.register(obj, name=ep.name)
        results = pm.hook.drakit_discover_devices(node=node)
        out[ep.name] = (ctx.driver_name, results[0] if results else None)
    return out


# -- backends ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", BACKENDS, ids=_ids(BACKENDS))
def test_backend_class_declares_settings_and_driver(ep: metadata.EntryPoint) -> None:
    cls: Any = ep.load()
    assert inspect.isclass(cls), f"{ep.value} must be a class"
    model: Any = getattr(cls, "settings_model", None)
    driver: Any = getattr(cls, "default_driver", None)
    assert inspect.isclass(model), f"{ep.value} needs a settings_model ClassVar"
    assert issubclass(model, PluginSettings), "settings_model must subclass PluginSettings"
    assert isinstance(driver, str), f"{ep.value} needs a default_driver ClassVar"
    check_driver_name(driver)
    # every setting has a default, so `plugins: [<name>]` enables the plugin
    settings = model.model_validate({})
    assert settings.driver is None
    assert settings.strategy is None


@pytest.mark.parametrize("ep", BACKENDS, ids=_ids(BACKENDS))
def test_backend_registers_against_the_hookspecs(ep: metadata.EntryPoint, node: NodeInfo) -> None:
    obj, _ = build(ep, node)
    pm = new_manager()
    pm.register(obj, name=ep.name)  # raises PluginValidationError on a wrong argument name
    pm.check_pending()  # raises on an implementation of a hook that does not exist
    implemented = {caller.name for caller in pm.get_hookcallers(obj) or []}
    assert implemented, f"{ep.name} implements no hook"
    assert implemented & {"drakit_discover_devices", "drakit_compose_devices"}, (
        f"{ep.name} neither discovers nor composes devices"
    )
    # a drakit_* method without @hookimpl is silently never called: refuse it
    unmarked = {n for n in dir(obj) if n.startswith("drakit_")} - implemented
    assert not unmarked, f"{ep.name}: {sorted(unmarked)} lack @hookimpl"


@pytest.mark.parametrize("ep", BACKENDS, ids=_ids(BACKENDS))
def test_backend_discovery_renders(
    ep: metadata.EntryPoint, discovered: dict[str, tuple[str, DeviceInventory | None]]
) -> None:
    driver, inv = discovered[ep.name]
    assert inv is None or isinstance(inv, DeviceInventory)
    if inv is None:
        return
    assert all(isinstance(d, Device) for d in inv.devices)
    slices = render_slices(driver, PROFILE, inv.devices, inv.counter_sets)
    published = sum(len(s["spec"].get("devices", [])) for s in slices)
    assert published == len(inv.devices)


def test_discovery_finds_the_profiles_hardware(
    discovered: dict[str, tuple[str, DeviceInventory | None]],
) -> None:
    counts = {name: len(inv.devices) if inv else 0 for name, (_, inv) in discovered.items()}
    assert counts["cpu"] > 0
    assert counts["nvidia_gpu"] == 8
    assert counts["amd_ainic"] == 8
    assert counts.get("amd_gpu", 0) == 0  # no AMD GPUs in this profile
    assert counts["composite"] == 0  # it composes, it does not discover


@pytest.mark.parametrize("ep", BACKENDS, ids=_ids(BACKENDS))
def test_backend_composition_renders(
    ep: metadata.EntryPoint,
    node: NodeInfo,
    discovered: dict[str, tuple[str, DeviceInventory | None]],
) -> None:
    everything: dict[DeviceKey, Device] = {}
    owners: dict[DeviceKey, str] = {}
    for plugin, (driver, inv) in discovered.items():
        for d in inv.devices if inv else ():
            key = DeviceKey(driver=driver, pool=d.pool or PROFILE, device=d.name)
            everything[key] = d
            owners[key] = plugin
    obj, ctx = build(ep, node)
    pm = new_manager()
    pm.register(obj, name=ep.name)
    for inv in pm.hook.drakit_compose_devices(node=node, devices=everything, owners=owners):
        assert isinstance(inv, DeviceInventory)
        assert inv.devices, f"{ep.name} composed an empty inventory; return None instead"
        render_slices(ctx.driver_name, PROFILE, inv.devices, inv.counter_sets)


# -- strategies --------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", STRATEGIES, ids=_ids(STRATEGIES))
def test_strategy_registers_and_answers_to_its_entry_point_name(ep: metadata.EntryPoint) -> None:
    target = ep.load()
    obj = target() if inspect.isclass(target) else target  # the host builds it the same way
    pm = new_manager()
    pm.register(obj, name=f"strategy:{ep.name}")
    pm.check_pending()
    implemented = {caller.name for caller in pm.get_hookcallers(obj) or []}
    assert implemented <= {
        "drakit_publish_order",
        "drakit_shape_request",
        "drakit_select_resources",
    }, f"strategy {ep.name} implements backend hooks"
    if isinstance(obj, Strategy):
        # the base class answers only for its own name: a mismatch would never be called
        assert type(obj).name == ep.name
