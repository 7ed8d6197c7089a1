"""What core hands each backend: :class:`PluginContext`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drakit.config import PluginSettings
from drakit.errors import PermanentError
from drakit.models import ClaimInfo, NodeInfo, PreparedDevice
from drakit.statefiles import StateDir
from drakit.strategy_models import SelectionRequest, SelectionResult

__all__ = ["Members", "PluginContext"]

S = TypeVar("S", bound=PluginSettings)


def _no_host(*_: object) -> Any:
    raise PermanentError("members are prepared through the plugin host; this context has none")


@dataclass(frozen=True)
class Members:
    """Prepare and unprepare member devices through the plugins that own them (composites).

    Only inside this plugin's own ``drakit_prepare_devices`` call, and only for plugins under
    this plugin's driver. Core records what each member returns in the checkpoint under that
    member's name, durably, before the next member is asked, and undoes it on unprepare like a
    device the member prepared alone; so a composite never imports a member and never unprepares
    members itself, except to roll back a prepare that failed half way.

    Attributes:
        prepare: ``prepare(plugin, claim)``: that plugin's ``drakit_prepare_devices`` for
            ``claim`` (the member devices, in the member's device names), with what the plugin
            holds for other claims; its ``PreparedDevice`` list.
        unprepare: ``unprepare(plugin, claim_uid, prepared)``: undo what ``prepare`` returned.
    """

    prepare: Callable[[str, ClaimInfo], list[PreparedDevice]] = _no_host
    unprepare: Callable[[str, str, Sequence[PreparedDevice]], None] = _no_host


@dataclass(frozen=True)
class PluginContext:
    """What core hands a backend when it instantiates it.

    Attributes:
        name: the plugin's entry point name (``cpu``).
        settings: the plugin's validated section (an instance of its ``settings_model``).
        node: the node and its sysfs root.
        driver_name: the DRA driver name this plugin publishes under.
        strategy: the configured strategy (section ``strategy``, else ``publish_strategy``).
        select: call the node-side selection hook (``drakit_select_resources``) by strategy.
        log: a logger named after the plugin.
        libraries: vendor libraries by module name (``pynvml``) that stand in for the
            installed ones; a simulated root brings its own (the fake NVML), a real node none.
            A backend that uses a vendor library takes it from here when present, so one code
            path serves both.
        dropped_fields: names of the fields the API server dropped from this plugin's driver's
            last published slices (``consumesCounters`` where ``DRAPartitionableDevices`` is
            off); empty without a cluster or while it keeps everything. A backend may publish
            without the feature when it sees its field here.
        peers: every enabled backend (this one included) -> the DRA driver it publishes
            under, in configuration order. A backend whose driver another backend shares (a
            composite and its members, ``docs/composite.md``) publishes every physical device
            as a counter set its devices consume, so that devices built from it can share it.
        members: prepare devices through the plugins that own them (:class:`Members`).
        state: this plugin's own directory for state files, ``<state-dir>/plugin_state/<name>/``
            under the node's ``--state-dir`` (:class:`drakit.statefiles.StateDir`: atomic,
            checksummed files, quarantined when damaged; created on first write). A backend
            keeps what it must remember across a crash there and nowhere else.
    """

    name: str
    settings: PluginSettings
    node: NodeInfo
    driver_name: str
    strategy: str | None
    select: Callable[[str, SelectionRequest], SelectionResult]
    log: logging.Logger
    libraries: Mapping[str, Any] = field(default_factory=dict)
    dropped_fields: Callable[[], frozenset[str]] = frozenset
    peers: Mapping[str, str] = field(default_factory=dict)
    members: Members = field(default_factory=Members)
    state: StateDir = field(default_factory=StateDir)

    @property
    def shares_driver(self) -> bool:
        """Another enabled backend publishes under this backend's driver."""
        return any(d == self.driver_name for n, d in self.peers.items() if n != self.name)

    def settings_as(self, model: type[S]) -> S:
        """This plugin's settings as its own model (typed access for the plugin's code).

        Raises:
            TypeError: the settings are not an instance of ``model`` (a packaging mistake:
                ``settings_model`` and this call disagree).
        """
        if not isinstance(self.settings, model):
            raise TypeError(
                f"plugin {self.name!r}: settings are {type(self.settings).__name__}, "
                f"not {model.__name__}; check the plugin's settings_model"
            )
        return self.settings
