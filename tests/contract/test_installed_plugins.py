"""The contract every installed plugin must meet.

drakit's own backends run the contract suite a vendor runs (:class:`drakit.testing.
BackendContract`), each in its own ``plugins/<name>/tests/test_contract.py``, on a profile where
it finds its hardware: discovery, rendering, prepare and unprepare over the real kubelet
sockets, health, bad configs, CDI file modes. The checks against the bare hook specs stay
parametrised over what is installed (``drakit.plugins`` and
``drakit.strategies`` entry points), so a vendor distribution installed next to drakit is
checked without any change here; each plugin is built by hand with a
:class:`~drakit.context.PluginContext` and registered with a pluggy manager that knows only
:mod:`drakit.hookspecs`, i.e. without the plugin host.
"""

from __future__ import annotations

import inspect
import logging
from importlib import metadata
from pathlib import Path
from typing import Any

import pluggy
import pytest

from drakit import hookspecs
from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.models import NodeInfo
from drakit.publish.render import check_driver_name
from drakit.strategies import Strategy
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit.testing.plugin import HostFactory, SimNodeFactory

PROFILE = "h200-8gpu-8ainic"
PAIRS_DRIVER = "pairs.composite.drakit.io"  # the composite's default driver
BACKENDS = sorted(metadata.entry_points(group="drakit.plugins"), key=lambda e: e.name)
STRATEGIES = sorted(metadata.entry_points(group="drakit.strategies"), key=lambda e: e.name)


def _ids(eps: list[metadata.EntryPoint]) -> list[str]:
    return [e.name for e in eps]


def test_discovery_finds_the_profiles_hardware(
    drakit_sim_node: SimNodeFactory, drakit_host: HostFactory
) -> None:
    plugins = [e.name for e in BACKENDS if e.name in {"cpu", "nvidia_gpu", "amd_ainic", "amd_gpu"}]
    sections: dict[str, dict[str, Any]] = {n: {} for n in plugins}
    for member in ("nvidia_gpu", "amd_ainic", "amd_gpu"):
        if member in sections:
            sections[member] = {"driver": PAIRS_DRIVER}
    host = drakit_host({"plugins": {**sections, "composite": {}}}, drakit_sim_node(PROFILE))
    found = host.discover()
    counts = {name: 0 for name in host.backends}
    for owner in found.owners.values():
        counts[owner] += 1
    assert counts["cpu"] > 0
    assert counts["nvidia_gpu"] == 8
    assert counts["amd_ainic"] == 8
    assert counts.get("amd_gpu", 0) == 0  # no AMD GPUs in this profile
    assert counts["composite"] == 8  # one GPU-NIC pair per switch, composed from the others


# -- every installed backend, against the bare hook specs ----------------------------------------


# The contract is checked against the specs alone, so this test builds its own manager
# instead of going through drakit.host.pluginhost (the one place production code builds one).
def new_manager() -> pluggy.PluginManager:  # noqa: TID251
    """A manager that knows only drakit's hook specs."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)  # noqa: TID251
    pm.add_hookspecs(hookspecs)
    return pm


def no_selection(strategy: str, request: SelectionRequest) -> SelectionResult:
    raise PermanentError(f"no strategy {strategy!r} in the contract test")


def build(ep: metadata.EntryPoint, root: Path) -> tuple[Any, PluginContext]:
    cls = ep.load()
    ctx = PluginContext(
        name=ep.name,
        settings=cls.settings_model.model_validate({}),
        node=NodeInfo(name=PROFILE, sysfs_root=str(root)),
        driver_name=cls.default_driver,
        strategy=None,
        select=no_selection,
        log=logging.getLogger(f"drakit.plugin.{ep.name}"),
    )
    return cls(ctx), ctx


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
def test_backend_registers_against_the_hookspecs(ep: metadata.EntryPoint, tmp_path: Path) -> None:
    obj, _ = build(ep, tmp_path)
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
