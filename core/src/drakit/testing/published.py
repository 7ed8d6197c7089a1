"""What a node publishes, as a test reads it: devices, counter sets and taints by name.

:meth:`SimHost.published` and :meth:`RunningNode.published` return a :class:`Published` built
from the ResourceSlices the node would write (API JSON), so a backend's test asks
``published.device("gpu-0").consumes_counters`` or ``published.counter_sets`` instead of
parsing slices or reaching into drakit's internal inventory types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Published", "PublishedDevice"]


@dataclass(frozen=True)
class PublishedDevice:
    """One device as its ResourceSlice carries it (API JSON values).

    Attributes:
        driver: the DRA driver.
        pool: the pool (the node's name for its default pool).
        name: the device's name.
        attributes: attribute name -> ``{"string": ...}`` / ``{"int": ...}`` / ...
        capacity: capacity name -> ``{"value": ..., "requestPolicy": ...}``.
        consumes_counters: ``[{"counterSet": ..., "counters": {name: {"value": ...}}}]``.
        taints: ``[{"key", "value", "effect"}]``: the backend's, and drakit's own
            ``drakit.io/unhealthy`` on an unhealthy device when ``health.taint_unhealthy`` is set.
        allow_multiple_allocations: whether claims share it (consumable capacity).
    """

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Any] = field(default_factory=dict)
    capacity: Mapping[str, Any] = field(default_factory=dict)
    consumes_counters: tuple[Mapping[str, Any], ...] = ()
    taints: tuple[Mapping[str, Any], ...] = ()
    allow_multiple_allocations: bool = False

    def attribute(self, name: str) -> Any:
        """An attribute's value, whatever its type (``None`` when the device lacks it).

        ``name`` may omit the driver's domain (``uuid`` for ``gpu.example.com/uuid``).
        """
        value = self.attributes.get(name)
        if value is None:
            value = self.attributes.get(f"{self.driver}/{name}")
        if not isinstance(value, Mapping):
            return None
        return next(iter(value.values()), None)


@dataclass(frozen=True)
class Published:
    """Everything a node publishes (built from its ResourceSlices).

    Attributes:
        slices: the ResourceSlices themselves.
        devices: every device, in slice order.
        counter_sets: ``(driver, pool, counter set)`` -> counter name -> its value.
    """

    slices: tuple[Mapping[str, Any], ...]
    devices: tuple[PublishedDevice, ...]
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, str]]

    @classmethod
    def from_slices(cls, slices: Iterable[Mapping[str, Any]]) -> Published:
        """The view of ``slices`` (``resource.k8s.io/v1`` JSON)."""
        listed = tuple(slices)
        devices: list[PublishedDevice] = []
        sets: dict[tuple[str, str, str], dict[str, str]] = {}
        for s in listed:
            spec = s["spec"]
            driver, pool = spec["driver"], spec["pool"]["name"]
            for cs in spec.get("sharedCounters") or []:
                sets[(driver, pool, cs["name"])] = {
                    n: str(c["value"]) for n, c in (cs.get("counters") or {}).items()
                }
            devices.extend(
                PublishedDevice(
                    driver=driver,
                    pool=pool,
                    name=d["name"],
                    attributes=dict(d.get("attributes") or {}),
                    capacity=dict(d.get("capacity") or {}),
                    consumes_counters=tuple(d.get("consumesCounters") or ()),
                    taints=tuple(d.get("taints") or ()),
                    allow_multiple_allocations=bool(d.get("allowMultipleAllocations")),
                )
                for d in spec.get("devices") or []
            )
        return cls(slices=listed, devices=tuple(devices), counter_sets=sets)

    def device(self, name: str, *, driver: str | None = None) -> PublishedDevice:
        """The device ``name`` (of ``driver``, when several drivers publish that name).

        Raises:
            KeyError: no such device, or several and ``driver`` was not given.
        """
        found = [
            d for d in self.devices if d.name == name and (driver is None or d.driver == driver)
        ]
        if len(found) != 1:
            known = ", ".join(sorted({d.name for d in self.devices})[:20])
            raise KeyError(
                f"{len(found)} published devices named {name!r}"
                + (f" of driver {driver!r}" if driver else "")
                + f" (devices: {known})"
            )
        return found[0]

    def tainted(self) -> dict[str, tuple[Mapping[str, Any], ...]]:
        """Device name -> its taints, for every device that has some."""
        return {d.name: d.taints for d in self.devices if d.taints}
