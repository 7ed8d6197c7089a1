"""What ``drakit explain`` reads: slices, a claim, classes, allocated claims, taint rules.

Offline they come from YAML/JSON files (:func:`from_files`); for a claim in the cluster, from the
API server through :mod:`drakit.kube` (:func:`from_cluster`). Either way they are parsed into the
allocator's models, and a malformed object fails with one error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import yaml
from pydantic import BaseModel, ValidationError

from drakit.allocator import DeviceClass, Node, ResourceClaim, ResourceSlice
from drakit.allocator.api import (
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaintRule,
    apply_taint_rules,
)
from drakit.config import validation_errors
from drakit.errors import ConfigInvalid, NotFoundError
from drakit.host.settings import yaml_shape_problem

if TYPE_CHECKING:
    from drakit.kube import KubeClient

__all__ = ["Inputs", "from_cluster", "from_files", "parse_slices", "read_objects"]

RESOURCE = "/apis/resource.k8s.io/v1"

_M = TypeVar("_M", bound=BaseModel)

MAX_SOURCE_BYTES = 256 * 1024 * 1024
"""One file of slices, claims or classes is at most this large."""


@dataclass(frozen=True)
class Inputs:
    """Everything one explanation needs (the arguments of :func:`drakit.explain.report.explain`)."""

    claim: ResourceClaim
    slices: list[ResourceSlice]
    classes: dict[str, DeviceClass]
    allocated: list[ResourceClaim]
    nodes: list[Node] | None
    """The nodes to explain for (``None``: every node with slices)."""


def read_objects(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """API objects from YAML/JSON files or directories (``List`` objects are flattened).

    Raises:
        ConfigInvalid: a file cannot be read or parsed.
    """
    out: list[dict[str, Any]] = []
    for path in paths:
        files = (
            sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
            if path.is_dir()
            else [path]
        )
        for f in files:
            docs = _json_docs(f) if f.suffix == ".json" else _yaml_docs(f)
            for doc in docs:
                if isinstance(doc, dict) and isinstance(doc.get("items"), list):
                    out += [d for d in doc["items"] if isinstance(d, dict)]
                elif isinstance(doc, dict):
                    out.append(doc)
    return out


def _yaml_docs(f: Path) -> list[Any]:
    try:
        text = f.read_text(encoding="utf-8")
        # a cluster's objects: larger and deeper than a configuration, never unbounded
        problem = yaml_shape_problem(text, max_bytes=MAX_SOURCE_BYTES, max_depth=64)
        docs = [] if problem else list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigInvalid([("", f"cannot read: {e}")], source=str(f)) from None
    if problem:
        raise ConfigInvalid([("", problem)], source=str(f))
    return docs


def _json_docs(f: Path) -> list[Any]:
    """A ``.json`` file's one document, read as JSON (as YAML if it is not JSON).

    JSON has no aliases to expand, and the standard library's parser guards its own recursion:
    a cluster's slices (``kubectl get resourceslices -o json``: 26,000 devices at 1,000 nodes,
    20 MiB) read in a fraction of a second, where YAML's event check took a minute and stopped
    at a million values. A ``.json`` file that is not JSON is read as YAML, as before.
    """
    try:
        if f.stat().st_size > MAX_SOURCE_BYTES:
            problem = f"the file is over {MAX_SOURCE_BYTES // 1024 // 1024} MiB"
            raise ConfigInvalid([("", problem)], source=str(f))
        data = f.read_bytes()
    except OSError as e:
        raise ConfigInvalid([("", f"cannot read: {e}")], source=str(f)) from None
    try:
        return [json.loads(data)]
    except ValueError:  # not JSON (nor UTF-8): YAML says why, or reads it
        return _yaml_docs(f)
    except RecursionError:
        raise ConfigInvalid([("", "nested too deep to read")], source=str(f)) from None


def _parse(kind: type[_M], docs: list[dict[str, Any]], source: str) -> list[_M]:
    parsed = []
    for i, doc in enumerate(docs):
        try:
            parsed.append(kind.model_validate(doc))
        except ValidationError as e:
            name = (doc.get("metadata") or {}).get("name", f"#{i}")
            raise ConfigInvalid(validation_errors(e), source=f"{source}: {name}") from None
    return parsed


def parse_slices(docs: list[dict[str, Any]], source: str) -> list[ResourceSlice]:
    """ResourceSlices, each distinct device validated once and shared by the slices listing it.

    A fleet's nodes publish the same devices (by content) in their own slices: 26,000 devices
    over 1,000 nodes are 26 distinct ones, and validating each device took most of reading the
    cluster's slices (``benchmarks/explain_fleet.py``). Devices are frozen, so sharing one is
    safe; a device that does not validate leaves its slice to be validated whole, so that the
    error names the slice and the device's path in it, as before.

    Raises:
        ConfigInvalid: a slice does not parse (naming it).
    """
    seen: dict[str, Device] = {}
    values: dict[str, DeviceAttribute | DeviceCapacity] = {}
    looked_at = 0
    out: list[dict[str, Any]] = []
    for doc in docs:
        # devices that are all different (a serial number each) share nothing: stop looking
        if len(seen) < _SHARING_CHECKED or 2 * len(seen) <= looked_at:
            shared, n = _with_devices(doc, seen, values)
            looked_at += n
            out.append(shared)
        else:  # their values still repeat (a model, a NUMA node, a memory size): share those
            out.append(_with_values_shared(doc, values))
    return _parse(ResourceSlice, out, source)


_SHARING_CHECKED = 512
"""Distinct devices after which :func:`parse_slices` stops sharing, unless at least half the
devices looked at were seen before (keying a device costs about a fifth of validating it)."""


def _with_devices(
    doc: dict[str, Any],
    seen: dict[str, Device],
    values: dict[str, DeviceAttribute | DeviceCapacity],
) -> tuple[dict[str, Any], int]:
    """``doc`` with its devices replaced by validated (shared) ones, and how many it lists.

    ``doc`` as it was when a device does not validate.
    """
    raw = _devices_of(doc)
    if not raw:
        return doc, 0
    devices: list[Device] = []
    for d in raw:
        key = repr(d)  # the parsed JSON or YAML: equal text, equal device
        device = seen.get(key)
        if device is None:
            try:
                device = Device.model_validate(_values_shared(d, values))
            except ValidationError:
                return doc, len(raw)
            seen[key] = device
        devices.append(device)
    return _with_devices_replaced(doc, devices), len(raw)


def _with_values_shared(
    doc: dict[str, Any], values: dict[str, DeviceAttribute | DeviceCapacity]
) -> dict[str, Any]:
    """``doc`` with each device's attribute and capacity values replaced by shared ones."""
    raw = _devices_of(doc)
    if not raw:
        return doc
    return _with_devices_replaced(doc, [_values_shared(d, values) for d in raw])


def _devices_of(doc: dict[str, Any]) -> list[Any]:
    """A slice document's ``spec.devices`` as written (empty when it is not a list)."""
    spec = doc.get("spec")
    raw = spec.get("devices") if isinstance(spec, dict) else None
    return raw if isinstance(raw, list) else []


def _with_devices_replaced(doc: dict[str, Any], devices: list[Any]) -> dict[str, Any]:
    """A copy of ``doc`` listing ``devices`` (``doc`` itself is not changed)."""
    return {**doc, "spec": {**doc["spec"], "devices": devices}}


def _values_shared(device: Any, values: dict[str, DeviceAttribute | DeviceCapacity]) -> Any:
    """``device`` (API JSON) with its attribute and capacity values validated once per value.

    Both are frozen, so one is shared by every device that carries the same value; the
    device's validation takes a validated one as it is. A value that does not validate leaves
    the device as it was, so that its slice's error names it where it is.
    """
    if not isinstance(device, dict):
        return device
    out = device
    for field, model in (("attributes", DeviceAttribute), ("capacity", DeviceCapacity)):
        raw = device.get(field)
        if not isinstance(raw, dict) or not raw:
            continue
        shared: dict[str, Any] = {}
        for name, value in raw.items():
            key = f"{field[0]}{value!r}"  # the parsed JSON or YAML: 1 and true, "1" and 1 differ
            known = values.get(key)
            if known is None:
                try:
                    known = model.model_validate(value)
                except ValidationError:
                    return device
                values[key] = known
            shared[name] = known
        out = {**out, field: shared}
    return out


def _claim(doc: dict[str, Any], source: str) -> ResourceClaim:
    if doc.get("kind") == "ResourceClaimTemplate":
        meta = doc.get("metadata") or {}
        doc = {
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
            "spec": doc["spec"]["spec"],
        }
    return _parse(ResourceClaim, [doc], source)[0]


def from_files(
    slice_paths: Iterable[Path],
    claim_path: Path,
    class_paths: Iterable[Path] = (),
    allocated_paths: Iterable[Path] = (),
    node_names: Iterable[str] = (),
    rule_paths: Iterable[Path] = (),
) -> Inputs:
    """Read an explanation's inputs from files or directories.

    DeviceTaintRules (from ``rule_paths``, or among the slices' documents) add their taints to
    the devices they select, as the scheduler does.

    Raises:
        ConfigInvalid: a file cannot be read, or an object in it does not parse.
    """
    objs = read_objects(slice_paths)
    rules = _parse(
        DeviceTaintRule,
        [o for o in objs if o.get("kind") == "DeviceTaintRule"] + read_objects(rule_paths),
        "DeviceTaintRules",
    )
    slices = apply_taint_rules(
        parse_slices(
            [o for o in objs if o.get("kind", "ResourceSlice") == "ResourceSlice"], "slices"
        ),
        rules,
    )
    [claim_doc, *_] = read_objects([claim_path]) or [{}]
    claim = _claim(claim_doc, str(claim_path))
    classes = _parse(DeviceClass, read_objects(class_paths), "classes")
    allocated = _parse(ResourceClaim, read_objects(allocated_paths), "allocated")
    nodes = [Node.named(n) for n in node_names] or None
    return Inputs(claim, slices, {c.name: c for c in classes}, allocated, nodes)


def read_nodes(paths: Iterable[Path]) -> list[Node]:
    """Node objects (with their labels) from files or directories (``kubectl get nodes -o yaml``).

    Raises:
        ConfigInvalid: a file cannot be read, or a Node in it does not parse.
    """
    return _parse(
        Node, [o for o in read_objects(paths) if o.get("kind", "Node") == "Node"], "nodes"
    )


def _taint_rules(kube: KubeClient) -> list[dict[str, Any]]:
    """The cluster's DeviceTaintRules: ``v1`` (1.37), else ``v1beta2`` (1.36), else none."""
    for version in ("v1", "v1beta2"):
        try:
            return kube.list_all(f"/apis/resource.k8s.io/{version}/devicetaintrules")
        except NotFoundError:
            continue
    return []


def from_cluster(
    namespace: str,
    name: str,
    kubeconfig: Path | None,
    node_names: Iterable[str] = (),
    *,
    template: bool = False,
) -> Inputs:
    """Read a claim in the cluster and what its allocation depends on.

    The nodes are ``node_names``, else every node that has ResourceSlices. ``template``: the
    object is a ResourceClaimTemplate (``drakit explain job``), not a ResourceClaim.

    Raises:
        ConfigInvalid: an object from the cluster does not parse.
        DrakitError: the cluster cannot be reached or refuses a read.
    """
    from drakit.kube import KubeClient  # noqa: PLC0415 - only this source needs a cluster

    kube = KubeClient.from_kubeconfig(kubeconfig)
    try:
        if template:
            doc = kube.request(
                "GET",
                f"{RESOURCE}/namespaces/{quote(namespace, safe='')}"
                f"/resourceclaimtemplates/{quote(name, safe='')}",
            )
            claim = _claim({"kind": "ResourceClaimTemplate", **doc}, f"{namespace}/{name}")
        else:
            claim = _claim(kube.get_resource_claim(namespace, name), f"{namespace}/{name}")
        slices = parse_slices(kube.list_all(f"{RESOURCE}/resourceslices"), "ResourceSlices")
        slices = apply_taint_rules(
            slices, _parse(DeviceTaintRule, _taint_rules(kube), "DeviceTaintRules")
        )
        classes = _parse(DeviceClass, kube.list_all(f"{RESOURCE}/deviceclasses"), "DeviceClasses")
        claims = [
            c
            for c in kube.list_all(f"{RESOURCE}/resourceclaims")
            if (c.get("status") or {}).get("allocation")
        ]
        allocated = _parse(ResourceClaim, claims, "ResourceClaims")
        node_objs = {n["metadata"]["name"]: n for n in kube.list_all("/api/v1/nodes")}
    finally:
        kube.close()
    wanted = tuple(node_names) or sorted(
        {s.spec.node_name for s in slices if s.spec.node_name} & set(node_objs)
    )
    nodes = [Node.model_validate(node_objs[n]) if n in node_objs else Node.named(n) for n in wanted]
    return Inputs(claim, slices, {c.name: c for c in classes}, allocated, nodes)
