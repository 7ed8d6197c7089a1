"""The plugin host: a typed facade over the hooks of the loaded backends and strategies.

Build one :class:`PluginHost` per process (tests build their own; there is no global manager).
Loading is :mod:`drakit.host.loader` (the only user of stevedore and pluggy's PluginManager),
the discovery round :mod:`drakit.host.discovery`, a composite's calls to its members
:mod:`drakit.host.members`. Every hook call goes to one plugin at a time, and a failure names
the plugin and the hook.

What a host holds: what it loaded (fixed once built), the hook callers it built (a cache), two
hook-ups the node sets once at start-up (:attr:`PluginHost.dropped_fields`,
:attr:`PluginHost.on_plugin_error`) and, per thread, the member session of the prepare call
running there. It keeps no discovery or claim state: :mod:`drakit.host.inventory` and the
prepare pipeline do.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from drakit.config import PluginSettings
from drakit.context import Members, PluginContext
from drakit.deviceclasses import DeviceClassSpec
from drakit.errors import ConfigInvalid, DrakitError, PermanentError
from drakit.host.discovery import Discovered, discover
from drakit.host.loader import HookRegistry, load_backends, load_strategies
from drakit.host.members import MemberCalls, MemberSession
from drakit.host.settings import DrakitSettings
from drakit.models import (
    ClaimInfo,
    ContainerResources,
    ContainerView,
    Device,
    DeviceHealth,
    DeviceKey,
    NodeInfo,
    PodSandboxView,
    PreparedDevice,
)
from drakit.statefiles import StateDir
from drakit.strategy_models import SelectionRequest, SelectionResult, ShapedClaim, SimpleRequest

__all__ = ["PluginHost"]

log = logging.getLogger(__name__)


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
        self.on_plugin_error: Callable[[str, str], None] | None = None
        """Called as ``(plugin, hook)`` when a hook raises (the node counts these in metrics)."""
        self.registry = HookRegistry()
        self.pm = self.registry.pm
        self.contexts: dict[str, PluginContext] = {}
        self._members = MemberCalls(self.contexts)
        self.backends, contexts = load_backends(self.registry, settings, self._context)
        self.contexts.update(contexts)
        self.strategies = load_strategies(
            self.registry, {c.strategy for c in self.contexts.values() if c.strategy}
        )
        for name, obj in (extra_plugins or {}).items():
            self.registry.register(name, obj)
        self.registry.check_pending()

    def _context(
        self, name: str, section: PluginSettings, driver: str, peers: Mapping[str, str]
    ) -> PluginContext:
        return PluginContext(
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
                prepare=functools.partial(self._members.prepare, name),
                unprepare=functools.partial(self._members.unprepare, name),
            ),
            # "plugin_state" has an underscore, so no driver's directory (a DNS name) is it
            state=StateDir(Path(self.settings.state_dir) / "plugin_state" / name),
        )

    def _dropped(self, driver: str) -> frozenset[str]:
        source = self.dropped_fields
        return source(driver) if source is not None else frozenset()

    # -- introspection -------------------------------------------------------------------------

    def driver_names(self) -> dict[str, str]:
        """Plugin name -> DRA driver name."""
        return {n: c.driver_name for n, c in self.contexts.items()}

    def plugins_for_driver(self, driver: str) -> list[str]:
        """The plugins publishing under ``driver``, in configuration order."""
        return [n for n, c in self.contexts.items() if c.driver_name == driver]

    def hook_implementations(self, name: str) -> list[str]:
        """The hooks a registered plugin implements."""
        return self.registry.implementations(name)

    def _only(self, plugin: str, hook: str) -> Callable[..., Any]:
        """A caller of ``hook`` on ``plugin`` alone that names the plugin in any failure."""
        caller = self.registry.caller(plugin, hook)

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

    def discover(self, tolerate: Collection[str] = ()) -> Discovered:
        """Run discovery, enrichment and composition (``drakit.host.inventory`` keeps the result).

        ``tolerate``: backends whose failure is recorded in ``Discovered.failed`` instead.

        Raises:
            PermanentError: a plugin returned something invalid (duplicate device, conflicting
                enrichment); the message names the plugin and device.
        """
        for ctx in self.contexts.values():
            ctx.skipped.begin_round()
        try:
            return discover(
                self.node, self.driver_names(), self.registry.names(), self._only, tolerate
            )
        finally:
            for ctx in self.contexts.values():
                ctx.skipped.end_round()

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
        held_claims: frozenset[str] = frozenset(),
    ) -> list[PreparedDevice]:
        """Call ``plugin``'s prepare hook for its devices of ``claim``.

        ``members`` serves the plugin's :attr:`PluginContext.members` during the call (the
        prepare pipeline records member results in the checkpoint); ``held_claims`` are the
        other claims the driver holds (recovered ones included).
        """
        outer = self._members.lend(plugin, members)
        try:
            res = self._only(plugin, "drakit_prepare_devices")(
                claim=claim, held=list(held), held_claims=held_claims
            )
        finally:
            self._members.restore(outer)
        if res is None:
            raise PermanentError(f"plugin {plugin!r} does not implement drakit_prepare_devices")
        return list(res)

    def unprepare(self, plugin: str, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        """Call ``plugin``'s unprepare hook."""
        self._only(plugin, "drakit_unprepare_devices")(claim_uid=claim_uid, prepared=list(prepared))

    # -- enforcement (NRI) -------------------------------------------------------------------

    def container_resources(
        self,
        plugin: str,
        container: ContainerView,
        devices: Sequence[PreparedDevice],
        held: Sequence[PreparedDevice],
    ) -> ContainerResources | None:
        """``plugin``'s answer for a container's cpuset (``None``: no opinion).

        Raises:
            PermanentError: the plugin returned something other than ``ContainerResources``.
        """
        hook = "drakit_container_resources"
        res = self._only(plugin, hook)(container=container, devices=list(devices), held=list(held))
        if res is not None and not isinstance(res, ContainerResources):
            raise PermanentError(
                f"plugin {plugin!r} returned {type(res).__name__} from {hook}; "
                "return a drakit.models.ContainerResources or None"
            )
        return res

    def pod_sandbox_start(
        self,
        plugin: str,
        sandbox: PodSandboxView,
        claim_uid: str,
        devices: Sequence[PreparedDevice],
    ) -> list[PreparedDevice] | None:
        """``plugin``'s ``drakit_pod_sandbox_start`` for one claim (``None``: nothing changed)."""
        res = self._only(plugin, "drakit_pod_sandbox_start")(
            sandbox=sandbox, claim_uid=claim_uid, devices=list(devices)
        )
        return None if res is None else list(res)

    def pod_sandbox_stop(
        self,
        plugin: str,
        sandbox: PodSandboxView,
        claim_uid: str,
        devices: Sequence[PreparedDevice],
    ) -> None:
        """``plugin``'s ``drakit_pod_sandbox_stop`` for one claim."""
        self._only(plugin, "drakit_pod_sandbox_stop")(
            sandbox=sandbox, claim_uid=claim_uid, devices=list(devices)
        )

    def health(self) -> dict[str, list[DeviceHealth]]:
        """Health per plugin."""
        out: dict[str, list[DeviceHealth]] = {}
        for name in self.backends:
            for batch in self._only(name, "drakit_device_health")(node=self.node):
                out.setdefault(name, []).extend(batch or [])
        return out

    def node_labels(
        self, devices: Mapping[str, Mapping[DeviceKey, Device]]
    ) -> dict[str, dict[str, str]]:
        """Plugin name -> the Node labels it contributes, from its own ``devices`` of a round.

        Every loaded backend is asked alone (with no devices when it discovered none); a
        backend that fails is logged and contributes nothing, so one backend cannot take the
        others' labels away. What comes back is not yet checked (:mod:`drakit.node.labels`).
        """
        out: dict[str, dict[str, str]] = {}
        for name in self.backends:
            try:
                res = self._only(name, "drakit_node_labels")(
                    node=self.node, devices=dict(devices.get(name, {}))
                )
            except DrakitError as e:
                log.warning("backend %s: no node labels this round: %s", name, e)
                continue
            for part in res:
                if part:
                    out.setdefault(name, {}).update({str(k): str(v) for k, v in part.items()})
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
        res = self.registry.call("drakit_publish_order", strategy=strategy, devices=list(devices))
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
        res = self.registry.call("drakit_shape_request", strategy=strategy, request=request)
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
        res = self.registry.call("drakit_select_resources", strategy=strategy, request=request)
        if res is None:
            raise PermanentError(f"no strategy {strategy!r} for selecting {request.kind} resources")
        return cast(SelectionResult, res)
