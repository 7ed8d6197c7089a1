"""Which of a backend's published fields an API server with feature gates off drops (the kit).

A field of a ResourceSlice behind a feature gate (``consumesCounters`` behind
``DRAPartitionableDevices``, ``taints`` behind ``DRADeviceTaints``, ...) is silently dropped by
an API server where that gate is off: the write succeeds, the field is gone. A node reports it
(its readiness, a Warning Event) and tells the backend through
:attr:`drakit.context.PluginContext.dropped_fields`, so the backend can publish without the
feature (the NVIDIA and AMD GPU backends then publish whole GPUs only).

:meth:`drakit.testing.SimHost.drop_fields` (and the ``drakit_gates_off`` fixture) shows a vendor
which of its devices' fields such a server would drop, and hands the backend the same report a
node would, so its reaction is tested without a cluster::

    with drakit_host({"plugins": {"acme_gpu": {}}}, node) as host:
        report = host.drop_fields({"DRAPartitionableDevices"})
        assert report.names("gpu.acme.example.com") == {"consumesCounters", "sharedCounters"}
        assert all(not d.consumes_counters for d in host.published().devices.values())

What the server keeps is modelled from the gate table core's publisher uses to name the gate in
its reports (``drakit.publish.diff.FIELD_GATES``): every field of that table whose gate is off is
removed; the report then comes from the same comparison the publisher makes between what it
sent and what the server returned. A real API server is the reference (the e2e control plane
runs with every gate on).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drakit.publish.diff import FIELD_GATES, dropped_fields, gate_for_path

__all__ = ["GATED_FIELDS", "DroppedFields", "fields_dropped", "stored_by_server"]

GATED_FIELDS: Mapping[str, str] = dict(FIELD_GATES)
"""ResourceSlice field name -> the feature gate that guards it."""


@dataclass(frozen=True)
class DroppedFields:
    """What the API server dropped from a node's slices.

    Attributes:
        gates_off: the feature gates that were off.
        paths: ``"<slice name>: <field path>"`` -> the gate that guards it, for every dropped
            field (``"node-1-gpu.acme.example.com-0: spec.devices[3].consumesCounters"``).
        by_driver: driver -> the dropped field names (what
            :attr:`~drakit.context.PluginContext.dropped_fields` returns to its backends).
    """

    gates_off: frozenset[str]
    paths: Mapping[str, str] = field(default_factory=dict)
    by_driver: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def names(self, driver: str) -> frozenset[str]:
        """The field names dropped from ``driver``'s slices (empty: none)."""
        return self.by_driver.get(driver, frozenset())

    def __bool__(self) -> bool:
        return bool(self.paths)


def _check_gates(gates_off: Iterable[str]) -> frozenset[str]:
    gates = frozenset(gates_off)
    known = set(GATED_FIELDS.values())
    unknown = sorted(gates - known)
    if unknown:
        raise ValueError(
            f"unknown feature gate(s) {', '.join(unknown)}: gates that guard ResourceSlice "
            f"fields are {', '.join(sorted(known))}"
        )
    return gates


def _strip(obj: Any, fields: frozenset[str]) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v, fields) for k, v in obj.items() if k not in fields}
    if isinstance(obj, list):
        return [_strip(v, fields) for v in obj]
    return obj


def stored_by_server(
    slices: Sequence[Mapping[str, Any]], gates_off: Iterable[str]
) -> list[dict[str, Any]]:
    """The slices as an API server with ``gates_off`` stores them (gated fields removed).

    Raises:
        ValueError: a gate that guards no ResourceSlice field (the message lists the known ones).
    """
    gates = _check_gates(gates_off)
    fields = frozenset(name for name, gate in GATED_FIELDS.items() if gate in gates)
    out = []
    for s in slices:
        stored = copy.deepcopy(dict(s))
        stored["spec"] = _strip(stored.get("spec", {}), fields)
        out.append(stored)
    return out


def fields_dropped(slices: Sequence[Mapping[str, Any]], gates_off: Iterable[str]) -> DroppedFields:
    """What an API server with ``gates_off`` drops from ``slices`` (API JSON, as published).

    Raises:
        ValueError: a gate that guards no ResourceSlice field.
    """
    gates = _check_gates(gates_off)
    paths: dict[str, str] = {}
    by_driver: dict[str, set[str]] = {}
    for sent, got in zip(slices, stored_by_server(slices, gates), strict=True):
        name = str(sent.get("metadata", {}).get("name", ""))
        driver = str(sent.get("spec", {}).get("driver", ""))
        for path in dropped_fields(sent.get("spec", {}), got["spec"]):
            gate = gate_for_path(path) or ""
            paths[f"{name}: {path}"] = gate
            innermost = [p for p in re.split(r"[.\[\]]+", path) if p in GATED_FIELDS]
            if innermost:
                by_driver.setdefault(driver, set()).add(innermost[-1])
    return DroppedFields(
        gates_off=gates,
        paths=paths,
        by_driver={d: frozenset(n) for d, n in by_driver.items()},
    )
