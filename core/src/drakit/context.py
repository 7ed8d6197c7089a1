"""What core hands each backend: :class:`PluginContext`."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from drakit.config import PluginSettings
from drakit.errors import PermanentError
from drakit.models import ClaimInfo, NodeInfo, PreparedDevice
from drakit.statefiles import StateDir
from drakit.strategy_models import SelectionRequest, SelectionResult

__all__ = ["Members", "PluginContext", "SkippedItem", "SkippedItems"]

S = TypeVar("S", bound=PluginSettings)

SkipKind = Literal["device", "label", "health"]
"""What was left out: a device (a GPU, a NIC), a Node label, a device's health watching."""

_REASON = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
MAX_SKIPPED = 256
"""Items one backend can name at once; more are logged only (the Events stay bounded)."""
MAX_REASONS = 16
"""Distinct reasons per backend; a further one is counted as ``other`` (bounded metrics)."""


@dataclass(frozen=True)
class SkippedItem:
    """One item a backend left out.

    Attributes:
        kind: what it is (:data:`SkipKind`).
        item: its name as the operator knows it (a GPU's index or UUID, a label's key, a NIC).
        reason: a short code (``nvml-error``, ``bad-value``): a metric label, so a fixed word
            per cause, never a value from the item.
        message: for humans (the Node Event): what is wrong with it and what to do.
    """

    kind: SkipKind
    item: str
    reason: str
    message: str


class SkippedItems:
    """What one backend leaves out, named per item: the node counts it and tells the Node.

    A backend calls :meth:`skip` for each device, label or health watch it leaves out while
    serving the rest. The node exports the counts as ``drakit_skipped_items{driver,kind,reason}``
    and records a Warning Event on the Node when an item is first named (or its reason
    changes). Core opens a round around each discovery: an item not named again in the next
    round is taken as fixed and dropped, except one named ``lasting`` (health watching turned
    off stays off until the process restarts). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], SkippedItem] = {}
        self._lasting: set[tuple[str, str]] = set()
        self._named: set[tuple[str, str]] | None = None
        self.listener: Callable[[SkippedItem], None] | None = None
        """Called (outside the lock) with each newly named item; set by the node."""

    def skip(
        self, kind: SkipKind, item: str, reason: str, message: str, *, lasting: bool = False
    ) -> None:
        """Name an item left out (see the class docstring)."""
        key = (kind, item)
        with self._lock:
            reasons = {i.reason for i in self._items.values()}
            if not _REASON.match(reason) or (reason not in reasons and len(reasons) >= MAX_REASONS):
                reason = "other"
            entry = SkippedItem(kind=kind, item=item[:253], reason=reason, message=message[:900])
            old = self._items.get(key)
            if old is None and len(self._items) >= MAX_SKIPPED:
                return
            self._items[key] = entry
            if lasting:
                self._lasting.add(key)
            if self._named is not None:
                self._named.add(key)
            new = old is None or old.reason != entry.reason
        if new and self.listener is not None:
            self.listener(entry)

    def begin_round(self) -> None:
        """A discovery round starts (core calls it)."""
        with self._lock:
            self._named = set()

    def end_round(self) -> None:
        """The round ended: items not named in it (and not lasting) are dropped."""
        with self._lock:
            named, self._named = self._named, None
            if named is None:
                return
            for key in list(self._items):
                if key not in named and key not in self._lasting:
                    del self._items[key]

    def items(self) -> list[SkippedItem]:
        """The items named now, sorted."""
        with self._lock:
            return sorted(self._items.values(), key=lambda i: (i.kind, i.item))

    def counts(self) -> dict[tuple[str, str], int]:
        """``(kind, reason)`` -> how many items are left out for it."""
        out: dict[tuple[str, str], int] = {}
        for i in self.items():
            out[(i.kind, i.reason)] = out.get((i.kind, i.reason), 0) + 1
        return out


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
        skipped: what this backend leaves out, named per item (:class:`SkippedItems`): a device
            that fails discovery, a Node label with a bad value, health watching the hardware
            does not support. The node counts and reports each one (metric, Node Event).
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
    skipped: SkippedItems = field(default_factory=SkippedItems)

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
