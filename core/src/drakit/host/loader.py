"""Loading: the only module that touches stevedore and pluggy's PluginManager.

It imports exactly the backends named in the configuration (entry point group
``drakit.plugins``), in that order, validates each backend's section with the backend's own
model, builds each with a :class:`PluginContext` and registers it with pluggy, checking every
hook implementation against :mod:`drakit.hookspecs`. Strategies (group ``drakit.strategies``)
are loaded the same way.

A configured plugin that is not installed, fails to import, or breaks the contract stops
start-up with one :class:`~drakit.errors.PluginLoadError` naming the plugin and the cause.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy
import stevedore
from pydantic import ValidationError

from drakit import hookspecs
from drakit.config import PluginSettings, validation_errors
from drakit.context import PluginContext
from drakit.errors import ConfigInvalid, PluginLoadError
from drakit.host.settings import DrakitSettings, known_keys, plugin_drivers

__all__ = [
    "PLUGIN_GROUP",
    "STRATEGY_GROUP",
    "ContextFactory",
    "HookRegistry",
    "InstalledEntry",
    "check_api_version",
    "installed_plugins",
    "installed_strategies",
    "load_backends",
    "load_entry_points",
    "load_strategies",
]

PLUGIN_GROUP = "drakit.plugins"
STRATEGY_GROUP = "drakit.strategies"

log = logging.getLogger(__name__)

ContextFactory = Callable[[str, PluginSettings, str, Mapping[str, str]], PluginContext]
"""Builds a backend's context from (plugin name, its validated section, its driver, every
plugin's driver): the facade wires its own calls (selection, members) into it."""


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


class HookRegistry:
    """pluggy's PluginManager for drakit's hook specifications, and the callers built from it.

    Registration checks each plugin against the contract; :meth:`caller` builds the caller of
    one hook on one plugin once (prepare asks for it per claim) and forgets them all when a
    plugin is registered.
    """

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._subset: dict[tuple[str, str], Callable[..., Any]] = {}

    def register(self, name: str, obj: object) -> None:
        """Register ``obj`` as plugin ``name``.

        Raises:
            PluginLoadError: a hook implementation does not match its specification.
        """
        self._subset.clear()
        try:
            self.pm.register(obj, name=name)
        except (pluggy.PluginValidationError, ValueError) as e:
            raise PluginLoadError(name, f"does not match the hook contract: {e}") from e

    def check_pending(self) -> None:
        """Refuse a hook implementation that matches no specification.

        Raises:
            PluginLoadError: naming the plugin that has one.
        """
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as e:
            raise PluginLoadError(self.pm.get_name(e.plugin) or str(e.plugin), str(e)) from e

    def names(self) -> list[str]:
        """Every registered plugin's name (backends, strategies, extras), newest first."""
        return [name for name, _ in self.pm.list_name_plugin()]

    def implementations(self, name: str) -> list[str]:
        """The hooks the registered plugin ``name`` implements."""
        plugin = self.pm.get_plugin(name)
        callers = self.pm.get_hookcallers(plugin) or [] if plugin is not None else []
        return sorted(c.name for c in callers)

    def caller(self, plugin: str, hook: str) -> Callable[..., Any]:
        """The caller of ``hook`` on ``plugin`` alone."""
        caller = self._subset.get((plugin, hook))
        if caller is None:  # built once per (plugin, hook): prepare calls this per claim
            others = [p for n, p in self.pm.list_name_plugin() if n != plugin]
            caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
            self._subset[(plugin, hook)] = caller
        return caller

    def call(self, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on every registered plugin (pluggy's semantics for that hook)."""
        return getattr(self.pm.hook, hook)(**kwargs)


def load_backends(
    registry: HookRegistry, settings: DrakitSettings, make_context: ContextFactory
) -> tuple[dict[str, object], dict[str, PluginContext]]:
    """Load, validate, build and register the backends ``settings`` names, in order.

    Returns:
        The backend objects and their contexts, by plugin name.

    Raises:
        ConfigInvalid: a section does not validate against its backend's model (every error).
        PluginLoadError: a backend is missing, fails to import or to start, or breaks the
            contract.
    """
    errors: list[tuple[str, str]] = []
    classes = load_entry_points(PLUGIN_GROUP, list(settings.plugins))
    validated: list[tuple[str, Any, PluginSettings]] = []
    for name, cls in classes:
        check_api_version(name, cls)
        model = getattr(cls, "settings_model", PluginSettings)
        try:
            section = model.model_validate(settings.plugins.get(name) or {})
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
    backends: dict[str, object] = {}
    contexts: dict[str, PluginContext] = {}
    for name, cls, section in validated:
        ctx = make_context(name, section, peers[name], peers)
        try:
            obj = cls(ctx)
        except ConfigInvalid:  # names the setting and the fix already
            raise
        except Exception as e:  # a vendor constructor can fail in any way
            raise PluginLoadError(name, f"failed to start: {e!r}") from e
        registry.register(name, obj)
        backends[name] = obj
        contexts[name] = ctx
    return backends, contexts


def load_strategies(registry: HookRegistry, wanted: set[str]) -> dict[str, object]:
    """Load and register every installed strategy; those in ``wanted`` must load.

    Raises:
        PluginLoadError: a wanted strategy is not installed or fails to load.
    """
    strategies: dict[str, object] = {}
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
        registry.register(f"strategy:{name}", obj)
        strategies[name] = obj
    unknown = sorted(wanted - set(strategies))
    if unknown:
        raise PluginLoadError(
            unknown[0],
            f"strategy not installed (installed: {', '.join(sorted(strategies))})",
        )
    return strategies
