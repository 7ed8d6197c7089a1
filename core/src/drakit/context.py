"""What core hands each backend: :class:`PluginContext`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drakit.config import PluginSettings
from drakit.models import NodeInfo
from drakit.strategy_models import SelectionRequest, SelectionResult

__all__ = ["PluginContext"]

S = TypeVar("S", bound=PluginSettings)


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
