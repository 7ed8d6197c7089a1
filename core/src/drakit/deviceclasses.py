"""The DeviceClasses of the configured backends (``drakit deviceclasses``, the Helm chart).

Every backend gets one class by default, named after the plugin with ``_`` turned into ``-``
(``cpu``, ``nvidia-gpu``, ``amd-ainic``, ``amd-gpu``) and selecting
``device.driver == "<driver>"``. A backend may publish its own classes instead through the
``drakit_device_classes`` hook (the composite backend: ``gpu-nic-pair`` and one
``gpu-nic-pair-numa<k>`` per NUMA node); core puts the driver test first in the class's one
selector (``device.driver == "<driver>" && (<the plugin's selector>) && ...``), so a plugin's
class can never select another driver's devices.

Configuration (``device_classes`` in the drakit file) adds an ``extendedResourceName`` to a
class, so pods written for device plugins (``resources.limits: {nvidia.com/gpu: 2}``) get DRA
devices through the scheduler's implicit claim (DRAExtendedResource, GA in 1.37)::

    device_classes:
      nvidia-gpu: {extended_resource_name: nvidia.com/gpu}
      gpu-nic-pair-numa0: {extended_resource_name: drakit.io/gpu-nic-pair-numa0}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "API_VERSION",
    "DeviceClassSettings",
    "DeviceClassSpec",
    "default_class_name",
    "render_device_classes",
    "shared_driver_class",
    "type_selector",
]

API_VERSION = "resource.k8s.io/v1"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _class_name(v: str) -> str:
    if not _DNS_SUBDOMAIN.match(v):
        raise ValueError(
            f"{v!r} is not a DeviceClass name (a DNS subdomain: lower case, digits, '-', '.')"
        )
    return v


class DeviceClassSpec(BaseModel):
    """One DeviceClass a backend contributes (``drakit_device_classes``).

    Attributes:
        name: the class name (a DNS subdomain).
        selectors: CEL expressions every device of the class must meet, besides the driver
            test core puts first; all are joined with ``&&`` into the class's one selector.
        extended_resource_name: the backend's default ``extendedResourceName`` (configuration
            overrides it).
        description: one line for humans, stored in the ``drakit.io/description`` annotation.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    selectors: tuple[str, ...] = ()
    extended_resource_name: str | None = None
    description: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _class_name(v)

    @field_validator("extended_resource_name")
    @classmethod
    def _extended(cls, v: str | None) -> str | None:
        return _extended_resource(v)


def _extended_resource(v: str | None) -> str | None:
    if v is not None and (
        not _QUALIFIED.match(v) or "/" not in v or v.startswith("kubernetes.io/")
    ):
        raise ValueError(
            f"{v!r} is not an extended resource name: use a domain-prefixed name outside "
            "kubernetes.io, e.g. 'nvidia.com/gpu' or 'drakit.io/gpu-nic-pair'"
        )
    return v


class DeviceClassSettings(BaseModel):
    """``device_classes.<class name>``: what configuration changes on one class."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    extended_resource_name: str | None = Field(
        default=None, description="Serve this extended resource (pod resources.limits) by DRA"
    )

    @field_validator("extended_resource_name")
    @classmethod
    def _extended(cls, v: str | None) -> str | None:
        return _extended_resource(v)


def type_selector(driver: str, types: Sequence[str]) -> str:
    """The CEL selector for devices whose ``type`` attribute is one of ``types``.

    Backends that share one driver (a composite and its members) tell their classes apart by
    it: ``device.attributes["pairs.composite.drakit.io"].type in ["gpu","mig"]``. The list is
    written as Helm's ``toJson`` writes it, so the chart renders the same expression.
    """
    listed = json.dumps(list(types), separators=(",", ":"))
    return f"device.attributes[{json.dumps(driver)}].type in {listed}"


def default_class_name(plugin: str) -> str:
    """The class a backend gets unless it publishes its own: ``nvidia_gpu`` -> ``nvidia-gpu``."""
    return plugin.replace("_", "-").lower()


def shared_driver_class(
    plugin: str, driver: str, types: Sequence[str], *, shares_driver: bool
) -> list[DeviceClassSpec] | None:
    """A backend's ``drakit_device_classes`` answer for its default class.

    ``None`` (core's default class: every device of the driver) unless the driver is shared
    (``PluginContext.shares_driver``, a composite's member); then the default class narrowed to
    the backend's devices by their ``type`` (:func:`type_selector`).
    """
    if not shares_driver:
        return None
    return [
        DeviceClassSpec(name=default_class_name(plugin), selectors=(type_selector(driver, types),))
    ]


def render_device_classes(
    drivers: Mapping[str, str],
    contributed: Mapping[str, Sequence[DeviceClassSpec] | None],
    settings: Mapping[str, DeviceClassSettings],
) -> list[dict[str, Any]]:
    """The ``resource.k8s.io/v1`` DeviceClass objects of the configured backends.

    Args:
        drivers: plugin name -> DRA driver name, in configuration order.
        contributed: plugin name -> the classes it publishes (``None``: the default class).
        settings: per-class configuration, by class name.

    Raises:
        ValueError: two backends publish a class of the same name, or ``settings`` names a
            class nobody publishes (the message names it and lists the classes).
    """
    out: list[dict[str, Any]] = []
    owners: dict[str, str] = {}
    for plugin, driver in drivers.items():
        specs = contributed.get(plugin) or [DeviceClassSpec(name=default_class_name(plugin))]
        for spec in specs:
            if spec.name in owners:
                raise ValueError(
                    f"DeviceClass {spec.name!r} is published by both {owners[spec.name]!r} and "
                    f"{plugin!r}; rename one (plugins.<name>.driver does not rename classes)"
                )
            owners[spec.name] = plugin
            conf = settings.get(spec.name, DeviceClassSettings())
            # One expression, the driver first: the scheduler evaluates every selector of the
            # class on every device of every slice of every node, one CEL program call each;
            # joined, a device of the driver costs one call, not 1 + len(spec.selectors).
            # benchmarks/README.md ("Scheduler throughput"): +20 % pods/s on composite nodes.
            expression = " && ".join(
                [f"device.driver == {json.dumps(driver)}", *(f"({e})" for e in spec.selectors)]
            )
            obj: dict[str, Any] = {
                "apiVersion": API_VERSION,
                "kind": "DeviceClass",
                "metadata": {
                    "name": spec.name,
                    "labels": {
                        "app.kubernetes.io/managed-by": "drakit",
                        "drakit.io/plugin": plugin,
                    },
                },
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            }
            if spec.description:
                obj["metadata"]["annotations"] = {"drakit.io/description": spec.description}
            extended = conf.extended_resource_name or spec.extended_resource_name
            if extended:
                obj["spec"]["extendedResourceName"] = extended
            out.append(obj)
    unknown = sorted(set(settings) - set(owners))
    if unknown:
        raise ValueError(
            f"device_classes.{unknown[0]}: no configured backend publishes this class "
            f"(classes: {', '.join(owners) or 'none'})"
        )
    return out
