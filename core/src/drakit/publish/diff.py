"""The pure part of publishing: comparing the slices drakit wants with those the server holds.

No I/O and no state: :mod:`drakit.publish.publisher` decides what to write from these answers.

* :func:`semantically_equal`: whether an observed ``spec`` carries the desired one (server-set
  fields, defaulted empties and quantity spellings ignored);
* :func:`dropped_fields` and :func:`gate_for_path`: what the server silently dropped from a
  write, and the feature gate that most likely explains it;
* small accessors for the identity of a slice (name, resourceVersion, pool, generation) and
  :func:`keep_time_added`, which carries server-set taint times into an update.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from drakit.models import quantity_value

__all__ = [
    "FIELD_GATES",
    "PoolKey",
    "dropped_fields",
    "fingerprint",
    "gate_for_path",
    "generation_of",
    "keep_time_added",
    "name_of",
    "pool_key",
    "resource_version",
    "semantically_equal",
]

PoolKey = tuple[str, str]
"""``(driver, pool name)``."""

#: Field name -> the feature gate that guards it (a disabled gate makes the server drop it).
FIELD_GATES: dict[str, str] = {
    "allowMultipleAllocations": "DRAConsumableCapacity",
    "requestPolicy": "DRAConsumableCapacity",
    "sharedCounters": "DRAPartitionableDevices",
    "consumesCounters": "DRAPartitionableDevices",
    "perDeviceNodeSelection": "DRAPartitionableDevices",
    "taints": "DRADeviceTaints",
    "bindsToNode": "DRADeviceBindingConditions",
    "bindingConditions": "DRADeviceBindingConditions",
    "bindingFailureConditions": "DRADeviceBindingConditions",
    "ints": "DRAListTypeAttributes",
    "bools": "DRAListTypeAttributes",
    "strings": "DRAListTypeAttributes",
    "versions": "DRAListTypeAttributes",
    "nodeAllocatableResourceMappings": "DRANodeAllocatableResources",
    "nodeAllocatableResources": "DRANodeAllocatableResources",
    "partitionTypeAttribute": "DRAPartitionableDevicesType",
    "skipNodeOperations": "DRAOptionalNodeOperations",
}

#: Keys whose string values are Kubernetes quantities (compared by value: ``1Gi`` == ``1024Mi``).
_QUANTITY_KEYS = frozenset({"value", "default", "min", "max", "step", "validValues"})
#: Keys the server fills in when the writer leaves them out.
_SERVER_SET_KEYS = frozenset({"timeAdded"})


def _empty(v: object) -> bool:
    return v is None or (isinstance(v, list | dict) and not v)


def _same_dict(d: dict[str, Any], o: dict[str, Any]) -> bool:
    for k in d.keys() | o.keys():
        if k not in d and k in _SERVER_SET_KEYS:
            continue
        if not _same(d.get(k), o.get(k), k):
            return False
    return True


def _same_str(d: str, o: str, key: str) -> bool:
    if d == o:
        return True
    if key not in _QUANTITY_KEYS:
        return False
    qd = quantity_value(d)
    return qd is not None and qd == quantity_value(o)


def _same(d: object, o: object, key: str) -> bool:
    if _empty(d) and _empty(o):
        return True
    if isinstance(d, dict) and isinstance(o, dict):
        return _same_dict(d, o)
    if isinstance(d, list) and isinstance(o, list):
        return len(d) == len(o) and all(_same(a, b, key) for a, b in zip(d, o, strict=True))
    if isinstance(d, str) and isinstance(o, str):
        return _same_str(d, o, key)
    return type(d) is type(o) and d == o


def semantically_equal(desired: Mapping[str, Any], observed: Mapping[str, Any]) -> bool:
    """Whether an observed ResourceSlice ``spec`` carries the desired ``spec``.

    Empty lists, maps and absent fields are equal; quantities compare by value; fields the
    server sets when left out (taint ``timeAdded``) are ignored. Everything else, including
    fields only the observed object has, must match.
    """
    return _same(dict(desired), dict(observed), "spec")


def dropped_fields(sent: object, got: object, path: str = "spec") -> list[str]:
    """Paths of non-empty fields in ``sent`` that are missing or empty in ``got``."""
    out: list[str] = []
    if isinstance(sent, dict):
        got_d = got if isinstance(got, dict) else {}
        for k, v in sent.items():
            if _empty(v):
                continue
            sub = f"{path}.{k}"
            if k not in got_d or (_empty(got_d[k]) and not isinstance(v, dict)):
                out.append(sub)
            else:  # an emptied map: name what was dropped inside it
                out.extend(dropped_fields(v, got_d[k], sub))
    elif isinstance(sent, list):
        got_l = got if isinstance(got, list) else []
        for i, v in enumerate(sent):
            if _empty(v):
                continue
            if i >= len(got_l) or _empty(got_l[i]):
                out.append(f"{path}[{i}]")
            else:
                out.extend(dropped_fields(v, got_l[i], f"{path}[{i}]"))
    return out


def gate_for_path(path: str) -> str | None:
    """The feature gate that most likely guards a dropped field, by its innermost known name."""
    for part in reversed(re.split(r"[.\[\]]+", path)):
        if part in FIELD_GATES:
            return FIELD_GATES[part]
    return None


def fingerprint(obj: Mapping[str, Any]) -> str:
    """A canonical JSON text of ``obj`` (equal objects, equal texts)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def name_of(obj: Mapping[str, Any]) -> str:
    """``metadata.name``."""
    return str(obj.get("metadata", {}).get("name", ""))


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion`` (empty if unset)."""
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def pool_key(obj: Mapping[str, Any]) -> PoolKey:
    """``(driver, pool name)`` of a slice."""
    spec = obj.get("spec", {})
    return str(spec.get("driver", "")), str(spec.get("pool", {}).get("name", ""))


def generation_of(obj: Mapping[str, Any]) -> int:
    """``spec.pool.generation`` (0 if unset or not a number)."""
    try:
        return int(obj.get("spec", {}).get("pool", {}).get("generation", 0))
    except (TypeError, ValueError):
        return 0


def keep_time_added(spec: dict[str, Any], observed: Mapping[str, Any]) -> None:
    """Copy server-set taint ``timeAdded`` values of the observed devices into ``spec``."""
    seen: dict[tuple[str, str, str, str], str] = {}
    for dev in observed.get("devices") or []:
        for t in dev.get("taints") or []:
            if t.get("timeAdded"):
                key = (
                    dev.get("name", ""),
                    t.get("key", ""),
                    t.get("value", ""),
                    t.get("effect", ""),
                )
                seen[key] = t["timeAdded"]
    if not seen:
        return
    for dev in spec.get("devices") or []:
        for t in dev.get("taints") or []:
            key = (dev.get("name", ""), t.get("key", ""), t.get("value", ""), t.get("effect", ""))
            if "timeAdded" not in t and key in seen:
                t["timeAdded"] = seen[key]
