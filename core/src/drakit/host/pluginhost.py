"""The plugin host: the only module that touches stevedore and pluggy's PluginManager.

It loads exactly the backends named in the configuration (entry point group
``drakit.plugins``), in that order, instantiates each with a :class:`PluginContext`, registers
it with pluggy, checks every hook implementation against :mod:`drakit.hookspecs`, and offers a
typed facade over the hooks. Strategies (group ``drakit.strategies``) are loaded the same way.

A configured plugin that is not installed, fails to import, or breaks the contract stops
start-up with one :class:`~drakit.errors.PluginLoadError` naming the plugin and the cause.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar, Protocol, cast

import pluggy
import stevedore
from pydantic import BaseModel, ValidationError

from drakit import hookspecs
from drakit.config import PluginSettings, validation_errors
from drakit.context import Members, PluginContext
from drakit.deviceclasses import DeviceClassSpec
from drakit.errors import ConfigInvalid, DrakitError, PermanentError, PluginLoadError
from drakit.host.settings import DrakitSettings, known_keys, plugin_drivers
from drakit.models import (
    ClaimInfo,
    Device,
    DeviceAttribute,
    DeviceHealth,
    DeviceInventory,
    DeviceKey,
    NodeInfo,
    PreparedDevice,
)
from drakit.strategy_models import SelectionRequest, SelectionResult, ShapedClaim, SimpleRequest

__all__ = [
    "PLUGIN_GROUP",
    "STRATEGY_GROUP",
    "Discovered",
    "InstalledEntry",
    "MemberSession",
    "PluginHost",
    "installed_plugins",
    "installed_strategies",
]

PLUGIN_GROUP = "drakit.plugins"
STRATEGY_GROUP = "drakit.strategies"

log = logging.getLogger(__name__)


class BackendClass(Protocol):
    """The shape of a backend entry point: a class built from a :class:`PluginContext`."""

    settings_model: ClassVar[type[PluginSettings]]
    default_driver: ClassVar[str]

    def __call__(self, context: PluginContext) -> object: ...


class MemberSession(Protocol):
    """What the prepare pipeline lends a plugin's prepare call for its members' devices."""

    def prepare(self, plugin: str, claim: ClaimInfo) -> list[PreparedDevice]:
        """Prepare ``claim`` through ``plugin`` and record the result."""
        ...

    def unprepare(self, plugin: str, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        """Undo ``prepared`` through ``plugin`` and forget it."""
        ...


@dataclass(frozen=True)
class InstalledEntry:
    """An installed entry point, for ``drakit plugins``."""

    group: str
    name: str
    target: str
    distribution: str
    version: str


def _installed(group: str) -> list[InstalledEntry]:
    out = []
    for ep in metadata.entry_points(group=group):
        dist = ep.dist
        out.append(
            InstalledEntry(
                group=group,
                name=ep.name,
                target=ep.value,
                distribution=dist.metadata["Name"] if dist else "?",
                version=dist.version if dist else "?",
            )
        )
    return sorted(out, key=lambda e: e.name)


def installed_plugins() -> list[InstalledEntry]:
    """Every installed backend entry point (whether enabled or not)."""
    return _installed(PLUGIN_GROUP)


def installed_strategies() -> list[InstalledEntry]:
    """Every installed strategy entry point."""
    return _installed(STRATEGY_GROUP)


def _load_failure(group: str) -> Callable[[Any, Any, BaseException], None]:
    def raise_it(_manager: Any, entrypoint: Any, exc: BaseException) -> None:
        name = getattr(entrypoint, "name", str(entrypoint))
        raise PluginLoadError(
            name, f"failed to import {getattr(entrypoint, 'value', '?')}: {exc!r}"
        ) from exc

    return raise_it


def _missing(group: str) -> Callable[[Iterable[str]], None]:
    def raise_it(names: Iterable[str]) -> None:
        installed = ", ".join(e.name for e in _installed(group)) or "none"
        missing = sorted(names)
        raise PluginLoadError(
            missing[0],
            f"not installed (no entry point {missing[0]!r} in group {group!r}; "
            f"installed: {installed}). Install its distribution or remove it from the "
            "configuration",
        )

    return raise_it


def load_entry_points(group: str, names: Sequence[str]) -> list[tuple[str, Any]]:
    """Import exactly ``names`` from entry point ``group``, in that order.

    Raises:
        PluginLoadError: a name is not installed or fails to import.
    """
    if not names:
        return []
    mgr = stevedore.NamedExtensionManager(
        namespace=group,
        names=list(names),
        name_order=True,
        invoke_on_load=False,
        on_load_failure_callback=_load_failure(group),
        on_missing_entrypoints_callback=_missing(group),
        propagate_map_exceptions=True,
    )
    return [(ext.name, ext.plugin) for ext in mgr]


def check_api_version(name: str, cls: object) -> None:
    """Refuse a plugin whose ``hook_api`` specifier excludes :data:`hookspecs.API_VERSION`.

    Raises:
        PluginLoadError: the declared specifier is malformed or does not admit this drakit's
            hook API; the message names the plugin, what it needs and what is installed.
    """
    wanted = getattr(cls, "hook_api", None)
    if wanted is None:
        return
    # imported here: a node whose plugins declare no specifier (the bundled backends) does not
    # carry packaging's specifier and version modules (~0.45 MiB resident)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet  # noqa: PLC0415

    try:
        spec = SpecifierSet(str(wanted))
    except InvalidSpecifier as e:
        raise PluginLoadError(
            name,
            f"hook_api = {wanted!r} is not a version specifier; write one such as "
            f"'>={hookspecs.API_VERSION},<{int(hookspecs.API_VERSION.split('.')[0]) + 1}'",
        ) from e
    if not spec.contains(hookspecs.API_VERSION, prereleases=True):
        try:
            installed = metadata.version("drakit")
        except metadata.PackageNotFoundError:
            installed = "(unknown version)"
        raise PluginLoadError(
            name,
            f"needs drakit hook API {spec} but the installed drakit {installed} serves "
            f"API {hookspecs.API_VERSION}; install a drakit whose API matches, or a release of "
            "the plugin made for this one (see docs/compatibility.md)",
        )


@dataclass
class Discovered:
    """The result of one discovery round across all plugins."""

    devices: dict[DeviceKey, Device] = field(default_factory=dict)
    owners: dict[DeviceKey, str] = field(default_factory=dict)
    counter_sets: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    """Counter sets per (driver, pool)."""

    def by_driver(self) -> dict[str, list[Device]]:
        """Devices grouped by driver name, in discovery order (what a backend's tests check)."""
        out: dict[str, list[Device]] = {}
        for key, dev in self.devices.items():
            out.setdefault(key.driver, []).append(dev)
        return out


class PluginHost:
    """Loads the configured backends and strategies and calls their hooks through a typed facade.

    Build one per process (tests build their own; there is no global manager).

    Args:
        settings: the validated configuration; ``settings.plugins`` names the backends in order.
        node: the node and sysfs root.
        extra_plugins: objects registered in addition (tests; built-in helpers), by name.
        libraries: vendor-library stand-ins handed to every backend's context
            (:attr:`PluginContext.libraries`), e.g. a simulated root's fake NVML.
    """

    def __init__(
        self,
        settings: DrakitSettings,
        node: NodeInfo,
        *,
        extra_plugins: Mapping[str, object] | None = None,
        libraries: Mapping[str, object] | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.libraries = dict(libraries or {})
        self.dropped_fields: Callable[[str], frozenset[str]] | None = None
        """Driver -> fields the API server drops from its slices (set by the node's publisher)."""
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.backends: dict[str, object] = {}
        self.contexts: dict[str, PluginContext] = {}
        self.strategies: dict[str, object] = {}
        self._subset: dict[tuple[str, str], Callable[..., Any]] = {}
        self.on_plugin_error: Callable[[str, str], None] | None = None
        """Called as ``(plugin, hook)`` when a hook raises (the node counts these in metrics)."""
        self._calls = threading.local()  # the member session of the prepare running here
        self._load_backends()
        self._load_strategies()
        for name, obj in (extra_plugins or {}).items():
            self._register(name, obj)
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginLoadError(self.pm.get_name(e.plugin) or str(e.plugin), str(e)) from e

    # -- loading -------------------------------------------------------------------------------

    def _register(self, name: str, obj: object) -> None:
        self._subset.clear()
        try:
            self.pm.register(obj, name=name)
        except (pluggy.PluginValidationError, ValueError) as e:
            raise PluginLoadError(name, f"does not match the hook contract: {e}") from e

    def _load_backends(self) -> None:
        errors: list[tuple[str, str]] = []
        classes = load_entry_points(PLUGIN_GROUP, list(self.settings.plugins))
        validated: list[tuple[str, Any, PluginSettings]] = []
        for name, cls in classes:
            check_api_version(name, cls)
            model = getattr(cls, "settings_model", PluginSettings)
            try:
                section = model.model_validate(self.settings.plugins.get(name) or {})
            except ValidationError as e:
                errors.extend(
                    validation_errors(
                        e, prefix=f"plugins.{name}", known=known_keys(model, f"plugins.{name}")
                    )
                )
                continue
            validated.append((name, cls, section))
        if errors:
            raise ConfigInvalid(errors, source="configuration")
        peers = plugin_drivers(
            {name: section for name, _, section in validated},
            {
                name: str(getattr(cls, "default_driver", f"{name}.drakit.io"))
                for name, cls, _ in validated
            },
        )
        for name, cls, section in validated:
            driver = peers[name]
            ctx = PluginContext(
                name=name,
                settings=section,
                node=self.node,
                driver_name=driver,
                strategy=section.strategy or self.settings.publish_strategy,
                select=self.select,
                log=logging.getLogger(f"drakit.plugin.{name}"),
                libraries=self.libraries,
                dropped_fields=functools.partial(self._dropped, driver),
                peers=dict(peers),
                members=Members(
                    prepare=functools.partial(self._member_prepare, name),
                    unprepare=functools.partial(self._member_unprepare, name),
                ),
            )
            try:
                obj = cls(ctx)
            except ConfigInvalid:  # names the setting and the fix already
                raise
            except Exception as e:  # a vendor constructor can fail in any way
                raise PluginLoadError(name, f"failed to start: {e!r}") from e
            self._register(name, obj)
            self.backends[name] = obj
            self.contexts[name] = ctx

    def _dropped(self, driver: str) -> frozenset[str]:
        source = self.dropped_fields
        return source(driver) if source is not None else frozenset()

    def _load_strategies(self) -> None:
        wanted = {c.strategy for c in self.contexts.values() if c.strategy}
        for entry in installed_strategies():
            try:
                [(name, cls)] = load_entry_points(STRATEGY_GROUP, [entry.name])
                check_api_version(name, cls)
            except PluginLoadError:
                if entry.name in wanted:
                    raise
                log.warning("strategy %r failed to load; skipped", entry.name, exc_info=True)
                continue
            obj = cls() if isinstance(cls, type) else cls
            self._register(f"strategy:{name}", obj)
            self.strategies[name] = obj
        unknown = sorted(wanted - set(self.strategies))
        if unknown:
            raise PluginLoadError(
                unknown[0],
                f"strategy not installed (installed: {', '.join(sorted(self.strategies))})",
            )

    # -- introspection -------------------------------------------------------------------------

    def driver_names(self) -> dict[str, str]:
        """Plugin name -> DRA driver name."""
        return {n: c.driver_name for n, c in self.contexts.items()}

    def plugins_for_driver(self, driver: str) -> list[str]:
        """The plugins publishing under ``driver``, in configuration order."""
        return [n for n, c in self.contexts.items() if c.driver_name == driver]

    def hook_implementations(self, name: str) -> list[str]:
        """The hooks a registered plugin implements."""
        plugin = self.pm.get_plugin(name)
        callers = self.pm.get_hookcallers(plugin) or [] if plugin is not None else []
        return sorted(c.name for c in callers)

    def _only(self, plugin: str, hook: str) -> Callable[..., Any]:
        """A caller of ``hook`` on ``plugin`` alone that names the plugin in any failure."""
        caller = self._subset.get((plugin, hook))
        if caller is None:  # built once per (plugin, hook): prepare calls this per claim
            others = [p for n, p in self.pm.list_name_plugin() if n != plugin]
            caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
            self._subset[(plugin, hook)] = caller

        def call(**kwargs: Any) -> Any:
            try:
                return caller(**kwargs)
            except DrakitError:
                if self.on_plugin_error is not None:
                    self.on_plugin_error(plugin, hook)
                raise
            except Exception as e:  # a vendor hook can fail in any way; name who failed
                if self.on_plugin_error is not None:
                    self.on_plugin_error(plugin, hook)
                log.debug("plugin %r failed in %s", plugin, hook, exc_info=True)
                raise PermanentError(f"plugin {plugin!r} failed in {hook}: {e!r}") from e

        return call

    # -- discovery -----------------------------------------------------------------------------

    def discover(self) -> Discovered:
        """Run discovery, enrichment and composition (``drakit.host.inventory`` keeps the result).

        Raises:
            PermanentError: a plugin returned something invalid (duplicate device, conflicting
                enrichment); the message names the plugin and device.
        """
        out = Discovered()
        for name in self.backends:
            inv = self._only(name, "drakit_discover_devices")(node=self.node)
            self._add_inventory(out, name, inv)
        self._enrich(out)
        for name in self.backends:
            inv = self._only(name, "drakit_compose_devices")(
                node=self.node, devices=dict(out.devices), owners=dict(out.owners)
            )
            self._add_inventory(out, name, inv)
        return out

    def _add_inventory(self, out: Discovered, plugin: str, result: Any) -> None:
        results = result if isinstance(result, list) else [result]
        driver = self.contexts[plugin].driver_name
        for inv in results:
            if inv is None:
                continue
            if not isinstance(inv, DeviceInventory):
                raise PermanentError(
                    f"plugin {plugin!r} returned {type(inv).__name__} from discovery; "
                    "expected DeviceInventory"
                )
            for dev in inv.devices:
                key = DeviceKey(driver=driver, pool=dev.pool or self.node.name, device=dev.name)
                if key in out.devices:
                    raise PermanentError(
                        f"device {key} is reported twice (by {out.owners[key]!r} and {plugin!r});"
                        " device names must be unique within a pool"
                    )
                out.devices[key] = dev
                out.owners[key] = plugin
            for cs in inv.counter_sets:
                pool = self.node.name
                out.counter_sets.setdefault((driver, pool), []).append(cs)

    def _enrich(self, out: Discovered) -> None:
        view = dict(out.devices)
        added: dict[DeviceKey, dict[str, tuple[str, DeviceAttribute]]] = {}
        for name in self.pm.list_name_plugin():
            plugin_name = name[0]
            patches = self._only(plugin_name, "drakit_enrich_devices")(node=self.node, devices=view)
            for patch in patches:
                if not patch:
                    continue
                for key, attrs in patch.items():
                    if key not in out.devices:
                        raise PermanentError(
                            f"plugin {plugin_name!r} enriched unknown device {key}"
                        )
                    for attr, raw in attrs.items():
                        value = DeviceAttribute.model_validate(raw)
                        own = out.devices[key].attributes.get(attr)
                        if own is not None and own != value:
                            raise PermanentError(
                                f"plugin {plugin_name!r} sets {attr}={value.value!r} on {key}, "
                                f"but its owner {out.owners[key]!r} set {own.value!r}"
                            )
                        prev = added.setdefault(key, {}).get(attr)
                        if prev is not None and prev[1] != value:
                            raise PermanentError(
                                f"plugins {prev[0]!r} and {plugin_name!r} disagree on {attr} of "
                                f"{key}: {prev[1].value!r} vs {value.value!r}"
                            )
                        added[key][attr] = (plugin_name, value)
        for key, attrs in added.items():
            out.devices[key] = out.devices[key].with_attributes(
                {a: v for a, (_, v) in attrs.items()}
            )

    # -- claims --------------------------------------------------------------------------------

    def parse_config(self, driver: str, parameters: Mapping[str, Any]) -> BaseModel:
        """Validate one opaque config object through the plugins of ``driver``.

        Raises:
            ConfigInvalid: invalid object, or no plugin of ``driver`` owns its kind.
        """
        api_version = parameters.get("apiVersion")
        kind = parameters.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise ConfigInvalid(
                [("apiVersion/kind", "an opaque config object needs string apiVersion and kind")]
            )
        for name in self.plugins_for_driver(driver):
            res = self._only(name, "drakit_parse_config")(
                api_version=api_version, kind=kind, parameters=dict(parameters)
            )
            if res is not None:
                return cast(BaseModel, res)
        owners = ", ".join(self.plugins_for_driver(driver)) or "none"
        raise ConfigInvalid(
            [
                (
                    "kind",
                    f"no plugin of driver {driver!r} owns {api_version}/{kind} (plugins: {owners});"
                    " check apiVersion and kind",
                )
            ]
        )

    def prepare(
        self,
        plugin: str,
        claim: ClaimInfo,
        held: Sequence[PreparedDevice] = (),
        members: MemberSession | None = None,
    ) -> list[PreparedDevice]:
        """Call ``plugin``'s prepare hook for its devices of ``claim``.

        ``members`` serves the plugin's :attr:`PluginContext.members` during the call (the
        prepare pipeline records member results in the checkpoint).
        """
        outer = getattr(self._calls, "session", None)
        self._calls.session = (plugin, members) if members is not None else None
        try:
            res = self._only(plugin, "drakit_prepare_devices")(claim=claim, held=list(held))
        finally:
            self._calls.session = outer
        if res is None:
            raise PermanentError(f"plugin {plugin!r} does not implement drakit_prepare_devices")
        return list(res)

    def _session(self, caller: str, member: str) -> MemberSession:
        session = getattr(self._calls, "session", None)
        if session is None or session[0] != caller:
            raise PermanentError(
                f"plugin {caller!r} asked for member {member!r} outside its own prepare call"
            )
        driver = self.contexts[caller].driver_name
        ctx = self.contexts.get(member)
        if member == caller or ctx is None or ctx.driver_name != driver:
            others = [p for p in self.plugins_for_driver(driver) if p != caller]
            raise PermanentError(
                f"plugin {caller!r} cannot prepare through {member!r}: members are the other "
                f"enabled plugins of driver {driver!r} ({', '.join(others) or 'none'})"
            )
        return cast("MemberSession", session[1])

    def _member_prepare(self, caller: str, member: str, claim: ClaimInfo) -> list[PreparedDevice]:
        return self._session(caller, member).prepare(member, claim)

    def _member_unprepare(
        self, caller: str, member: str, claim_uid: str, prepared: Sequence[PreparedDevice]
    ) -> None:
        self._session(caller, member).unprepare(member, claim_uid, prepared)

    def unprepare(self, plugin: str, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        """Call ``plugin``'s unprepare hook."""
        self._only(plugin, "drakit_unprepare_devices")(claim_uid=claim_uid, prepared=list(prepared))

    def health(self) -> dict[str, list[DeviceHealth]]:
        """Health per plugin."""
        out: dict[str, list[DeviceHealth]] = {}
        for name in self.backends:
            for batch in self._only(name, "drakit_device_health")(node=self.node):
                out.setdefault(name, []).extend(batch or [])
        return out

    # -- cluster objects -----------------------------------------------------------------------

    def device_classes(self) -> dict[str, Sequence[DeviceClassSpec] | None]:
        """Plugin name -> the DeviceClasses it publishes (``None``: the default class)."""
        out: dict[str, Sequence[DeviceClassSpec] | None] = {}
        for name, ctx in self.contexts.items():
            res = self._only(name, "drakit_device_classes")(driver=ctx.driver_name)
            if res is not None and not all(isinstance(s, DeviceClassSpec) for s in res):
                raise PermanentError(
                    f"plugin {name!r} returned something other than DeviceClassSpec objects "
                    "from drakit_device_classes"
                )
            out[name] = None if res is None else list(res)
        return out

    # -- strategies ----------------------------------------------------------------------------

    def publish_order(self, strategy: str | None, devices: Sequence[Device]) -> list[Device]:
        """Devices in the order ``strategy`` publishes them (unchanged if none applies)."""
        if not strategy:
            return list(devices)
        res = self.pm.hook.drakit_publish_order(strategy=strategy, devices=list(devices))
        if res is None:
            return list(devices)
        ordered = list(res)
        if sorted(d.name for d in ordered) != sorted(d.name for d in devices):
            raise PermanentError(f"strategy {strategy!r} publish order is not a permutation")
        return ordered

    def shape(self, strategy: str, request: SimpleRequest) -> ShapedClaim:
        """Shape a simple request with ``strategy``.

        Raises:
            PermanentError: no installed strategy shapes requests under that name.
        """
        res = self.pm.hook.drakit_shape_request(strategy=strategy, request=request)
        if res is None:
            raise PermanentError(
                f"strategy {strategy!r} does not shape requests "
                f"(installed: {', '.join(sorted(self.strategies))})"
            )
        return cast(ShapedClaim, res)

    def select(self, strategy: str, request: SelectionRequest) -> SelectionResult:
        """Node-side selection with ``strategy``.

        Raises:
            PermanentError: no implementation handles ``strategy`` for ``request.kind``.
        """
        res = self.pm.hook.drakit_select_resources(strategy=strategy, request=request)
        if res is None:
            raise PermanentError(f"no strategy {strategy!r} for selecting {request.kind} resources")
        return cast(SelectionResult, res)
