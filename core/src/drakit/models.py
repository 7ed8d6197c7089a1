"""pydantic models that cross drakit's boundaries: hooks, the kubelet services and the API server.

Every value a plugin receives from core is frozen. Device models mirror ``resource.k8s.io/v1``
(see ``docs/architecture.md``); :mod:`drakit.publish.render` renders them to ResourceSlice objects
and checks the API server's limits before anything is sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from fractions import Fraction
from typing import Annotated, Any, Literal, Self, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    SerializationInfo,
    ValidationError,
    model_serializer,
    model_validator,
)

__all__ = [
    "AllocatedDevice",
    "AttributeValue",
    "CdiDeviceNode",
    "CdiEdits",
    "CdiHook",
    "CdiMount",
    "CdiPath",
    "ClaimInfo",
    "ClaimPrepareResult",
    "ClaimRef",
    "ClaimUnprepareResult",
    "ContainerResources",
    "ContainerView",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceHealth",
    "DeviceInventory",
    "DeviceKey",
    "DeviceTaint",
    "EnvEntry",
    "NetworkData",
    "NodeAllocatableMapping",
    "NodeAllocatableResource",
    "NodeInfo",
    "PodRef",
    "PodSandboxView",
    "PreparedDevice",
    "PreparedDeviceRef",
    "Quantity",
    "RequestPolicy",
    "ValidRange",
    "attribute",
    "attribute_value_problem",
    "quantity_value",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_ATTRIBUTE_STRING_BYTES = 64
"""``DeviceAttributeMaxValueLength``: strings and versions, counted in UTF-8 bytes as Go does."""
_SAFE_CHARS = MAX_ATTRIBUTE_STRING_BYTES // 4  # a UTF-8 character has at most 4 bytes

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$"
)
"""Semantic version 2.0.0, as the API server checks ``version`` attributes."""


def attribute_value_problem(kind: str, value: object) -> str | None:
    """What the API server would object to in one attribute value (``None``: nothing).

    Args:
        kind: the wire name of the attribute's field (``int``, ``string``, ``versions``, ...).
        value: its value (a tuple for the list kinds).
    """
    items = value if isinstance(value, tuple) else (value,)
    if kind in ("ints", "bools", "strings", "versions") and not items:
        return "a list attribute may not be empty"
    for v in items:
        if kind in ("int", "ints") and isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
            return f"{v} is outside the int64 range ({INT64_MIN} to {INT64_MAX})"
        if isinstance(v, str):
            size = len(v.encode("utf-8"))
            if size > MAX_ATTRIBUTE_STRING_BYTES:
                return (
                    f"{v[:20]!r}... is {size} bytes in UTF-8; at most "
                    f"{MAX_ATTRIBUTE_STRING_BYTES} are allowed"
                )
            if kind in ("version", "versions") and not SEMVER.match(v):
                return f"{v!r} is not a semantic version (example: 1.2.3 or 2.4.0-rc.1)"
    return None


_QUANTITY = re.compile(
    r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def _check_quantity(value: str | int) -> str:
    text = str(value)
    if not _QUANTITY.match(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 8, 80Gi, 500m)")
    return text


_QUANTITY_PARTS = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_EXPONENT = 64  # beyond any quantity the API server keeps exactly; stops 1e999999999
_MAX_NUMBER_CHARS = 128  # likewise for the digits (Python refuses int() of 4,300 and more)


def quantity_value(text: str) -> Fraction | None:
    """The exact value of a Kubernetes quantity (``1Gi`` -> 1073741824), ``None`` if not one."""
    m = _QUANTITY_PARTS.match(text.strip())
    if not m:
        return None
    number, exponent, suffix = m.group(1), m.group(2), m.group(3) or ""
    if len(number) > _MAX_NUMBER_CHARS:
        return None
    value = Fraction(number)
    if exponent:
        power = int(exponent[1:])
        if abs(power) > _MAX_EXPONENT:
            return None
        return value * Fraction(10) ** power
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * Fraction(10) ** _DECIMAL[suffix]


Quantity = Annotated[
    str,
    BeforeValidator(_check_quantity),
    Field(description="A Kubernetes resource quantity such as 8 or 80Gi"),
]
"""A Kubernetes quantity string (``8``, ``80Gi``, ``500m``)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class DeviceAttribute(_Frozen):
    """One typed device attribute: exactly one of the fields is set.

    Plain Python values are accepted where a ``DeviceAttribute`` is expected: ``int`` becomes
    ``int``, ``bool`` becomes ``bool``, ``str`` becomes ``string``. Versions must be explicit:
    ``DeviceAttribute(version="1.2.3")``.
    """

    # constructed by wire name (``DeviceAttribute(int=3)``), so no population by field name
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)

    int_: int | None = Field(default=None, alias="int")
    bool_: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None
    ints: tuple[int, ...] | None = None
    bools: tuple[bool, ...] | None = None
    strings: tuple[str, ...] | None = None
    versions: tuple[str, ...] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _checked(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # One validator for both steps, so that a plain value (most of the ~8,000 a 2,048-VF
        # node's first discovery round types) costs one Python call and no scan of the fields:
        # it sets one field by construction, whose value alone is checked here.
        if isinstance(data, str):
            # 16 characters are at most 64 bytes in UTF-8: only longer ones are encoded
            if len(data) > _SAFE_CHARS and len(data.encode("utf-8")) > MAX_ATTRIBUTE_STRING_BYTES:
                raise ValueError(attribute_value_problem("string", data))
            return handler({"string": data})
        if isinstance(data, bool):
            return handler({"bool": data})
        if isinstance(data, int):
            if not INT64_MIN <= data <= INT64_MAX:
                raise ValueError(attribute_value_problem("int", data))
            return handler({"int": data})
        if isinstance(data, cls):
            return handler(data)  # validated when it was made (frozen since)
        out = handler(data)
        # ``__dict__``, not ``iter(out)``: its ``__iter__`` costs several times the check
        set_fields = [k for k, v in out.__dict__.items() if v is not None]
        if len(set_fields) != 1:
            raise ValueError(
                f"a device attribute sets exactly one of int, bool, string, version, ints, bools, "
                f"strings, versions (got {set_fields or 'none'})"
            )
        name = set_fields[0]
        problem = attribute_value_problem(_WIRE_NAMES.get(name, name), out.__dict__[name])
        if problem:
            raise ValueError(problem)
        return out

    @property
    def value(self) -> int | bool | str | tuple[int, ...] | tuple[bool, ...] | tuple[str, ...]:
        """The attribute's value, whatever its type."""
        for v in self.__dict__.values():
            if v is not None:
                return v  # type: ignore[no-any-return]
        raise AssertionError("unreachable: validated to hold one value")

    @property
    def kind(self) -> str:
        """The wire name of the set field: ``int``, ``bool``, ``string``, ``version``, ..."""
        for name, v in self.__dict__.items():
            if v is not None:
                return _WIRE_NAMES.get(name, name)
        raise AssertionError("unreachable: validated to hold one value")

    def value_count(self) -> int:
        """How many values this attribute contributes to the per-device value limit."""
        v = self.value
        return len(v) if isinstance(v, tuple) else 1

    def to_api(self) -> dict[str, Any]:
        """The ``resource.k8s.io/v1`` JSON form."""
        v = self.value
        return {self.kind: list(v) if isinstance(v, tuple) else v}


_WIRE_NAMES = {
    name: field.alias for name, field in DeviceAttribute.model_fields.items() if field.alias
}
"""Field name -> wire name where they differ (``int_`` -> ``int``)."""

AttributeValue = DeviceAttribute | int | bool | str
"""What a plugin may write as an attribute value."""


_validate_attribute = DeviceAttribute.__pydantic_validator__.validate_python


def attribute(value: AttributeValue | Mapping[str, object]) -> DeviceAttribute:
    """``value`` as a validated :class:`DeviceAttribute`, as ``DeviceAttribute.model_validate``.

    The same validation and errors (``pydantic.ValidationError`` naming the problem), without
    ``model_validate``'s handling of its keyword options: about 1 us less of 3.6 per value, for
    backends that type thousands of values per discovery round (a node with 2,048 VFs has
    about 8,400 distinct ones in its first round).
    """
    return cast(DeviceAttribute, _validate_attribute(value))


class ValidRange(_Frozen):
    """``CapacityRequestPolicyRange``: requests from ``min`` to ``max`` in ``step`` increments."""

    min: Quantity
    max: Quantity | None = None
    step: Quantity | None = None


class RequestPolicy(_Frozen):
    """How much of a consumable capacity one claim may take (DRAConsumableCapacity)."""

    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] | None = Field(default=None, alias="validValues")
    valid_range: ValidRange | None = Field(default=None, alias="validRange")

    @model_validator(mode="after")
    def _one_of(self) -> Self:
        if self.valid_values is not None and self.valid_range is not None:
            raise ValueError("set at most one of validValues and validRange")
        return self


class DeviceCapacity(_Frozen):
    """A device capacity: a quantity and, for shareable devices, a request policy."""

    value: Quantity
    request_policy: RequestPolicy | None = Field(default=None, alias="requestPolicy")

    @model_validator(mode="before")
    @classmethod
    def _from_plain(cls, data: Any) -> Any:
        if isinstance(data, (int, str)):
            return {"value": data}
        return data


class CounterSet(_Frozen):
    """A set of shared counters (KEP-4815) that partitionable devices consume from."""

    name: str
    counters: dict[str, Quantity]


class CounterConsumption(_Frozen):
    """How much of a counter set one device consumes while allocated."""

    counter_set: str = Field(alias="counterSet")
    counters: dict[str, Quantity]


class DeviceTaint(_Frozen):
    """A taint on a device (DRADeviceTaints), e.g. published while the device is unhealthy."""

    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "None"] = "NoSchedule"


class DeviceKey(_Frozen):
    """Identifies a device on a node: its driver, pool and name."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class NodeAllocatableMapping(_Frozen):
    """How allocating a device counts against a node-allocatable resource (KEP-5517).

    ``capacity_key``: the device's capacity whose consumed amount is counted (times
    ``capacity_multiplier``); ``device_multiplier``: an amount counted per allocated device.
    """

    capacity_key: str | None = Field(default=None, alias="capacityKey", max_length=63)
    capacity_multiplier: Quantity | None = Field(default=None, alias="capacityMultiplier")
    device_multiplier: Quantity | None = Field(default=None, alias="deviceMultiplier")


class NodeAllocatableResource(_Frozen):
    """One ``Device.nodeAllocatableResources`` entry (alpha ``DRANodeAllocatableResources``)."""

    mapping: NodeAllocatableMapping


class Device(_Frozen):
    """A device as a plugin discovers it; rendered into a ResourceSlice by core.

    ``pool`` is ``None`` for the node's default pool (named after the node). Attribute and
    capacity names without a domain belong to the driver's own domain; standard names carry
    theirs (``resource.kubernetes.io/pcieRoot``).
    """

    name: str
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = Field(default=(), alias="consumesCounters")
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple_allocations: bool | None = Field(default=None, alias="allowMultipleAllocations")
    pool: str | None = None
    node_allocatable_resources: dict[str, NodeAllocatableResource] = Field(
        default_factory=dict,
        alias="nodeAllocatableResources",
        description=(
            "KEP-5517: the node-allocatable resources (cpu, memory) an allocation of this device "
            "stands for, so the scheduler does not count them twice"
        ),
    )

    @model_validator(mode="wrap")
    @classmethod
    def _name_the_device(cls, data: Any, handler: ModelWrapValidatorHandler[Device]) -> Device:
        """Errors name the device (``device 'gpu-0': attributes.driverVersion: ...``)."""
        try:
            return handler(data)
        except ValidationError as e:
            name = data.get("name") if isinstance(data, dict) else None
            if not isinstance(name, str):
                raise
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'device'}: "
                f"{str(err['msg']).removeprefix('Value error, ')}"
                for err in e.errors(include_url=False)
            )
            raise ValueError(f"device {name!r}: {problems}") from None

    def with_attributes(self, extra: dict[str, DeviceAttribute]) -> Device:
        """A copy with ``extra`` attributes added (existing names are replaced)."""
        return self.model_copy(update={"attributes": {**self.attributes, **extra}})

    def with_taints(self, taints: tuple[DeviceTaint, ...]) -> Device:
        """A copy with its taints replaced."""
        return self.model_copy(update={"taints": taints})


class DeviceInventory(_Frozen):
    """What one plugin discovered: its devices and the counter sets they consume from."""

    devices: tuple[Device, ...] = ()
    counter_sets: tuple[CounterSet, ...] = Field(default=(), alias="counterSets")


class NodeInfo(_Frozen):
    """The node drakit runs on, as plugins see it.

    ``labels`` are the Node object's labels as the node process last read them (at each
    discovery round, through :mod:`drakit.kube`); empty without a cluster. Hooks that take a
    ``node`` argument get the current ones; ``PluginContext.node`` is the node at start-up.
    """

    name: str
    sysfs_root: str = Field(description="Root under which sys/ and proc/ are read ('/' on a node)")
    labels: dict[str, str] = Field(
        default_factory=dict, description="The Node's labels (e.g. what a fabric manager wrote)"
    )


class AllocatedDevice(_Frozen):
    """One device of an allocation result that a plugin must prepare."""

    request: str
    driver: str
    pool: str
    device: str
    consumed_capacity: dict[str, Quantity] = Field(default_factory=dict, alias="consumedCapacity")
    share_id: str | None = Field(default=None, alias="shareID")
    admin_access: bool = Field(default=False, alias="adminAccess")
    config: tuple[Any, ...] = Field(
        default=(),
        description="Validated opaque configs for this device, class first then claim (later wins)",
    )

    @property
    def key(self) -> DeviceKey:
        """This device's key on the node."""
        return DeviceKey(driver=self.driver, pool=self.pool, device=self.device)


class ClaimInfo(_Frozen):
    """The ResourceClaim being prepared, reduced to what plugins need."""

    namespace: str
    name: str
    uid: str
    devices: tuple[AllocatedDevice, ...]


_UINT32_MAX = 2**32 - 1
_MAX_CDI_PATH = 4096


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or "\0" in value or len(value.encode()) > _MAX_CDI_PATH:
        raise ValueError(
            f"{value[:80]!r} is not an absolute path (it must start with '/', contain no NUL "
            f"and be at most {_MAX_CDI_PATH} bytes)"
        )
    if ".." in value.split("/"):
        raise ValueError(f"{value[:80]!r} has a '..' component; write the path without it")
    return value


def _env_entry(value: str) -> str:
    name, eq, _ = value.partition("=")
    if not eq or not name or "\0" in value:
        raise ValueError(
            f"{value[:80]!r} is not an environment entry: write NAME=value (a non-empty name, "
            "no NUL)"
        )
    return value


_CDI_SPELLING = {
    "host_path": "hostPath",
    "container_path": "containerPath",
    "file_mode": "fileMode",
    "hook_name": "hookName",
}
"""Field name -> CDI's spelling, where they differ."""

CdiPath = Annotated[str, AfterValidator(_absolute_path)]
"""An absolute path without ``..`` components (a CDI ``path``, ``hostPath``, ``containerPath``)."""
EnvEntry = Annotated[str, AfterValidator(_env_entry)]
"""One ``NAME=value`` environment entry, as CDI's ``env`` lists them."""


class _Cdi(_Frozen):
    """A CDI spec object: frozen, unknown keys refused, CDI's spelling (``hostPath``) or ours.

    Serialised with only the fields that were given and are set (not ``None``, not empty), in
    the checkpoint as in a spec, so a device node is ``{"path": "/dev/nvidia0"}`` and not
    eight nulls more. Built directly from the fields: a spec and a checkpoint record are
    written on every prepare, and pydantic's own serialiser with a filter costs twice as much.
    """

    @model_serializer(mode="plain")
    def _given_fields(self, info: SerializationInfo) -> dict[str, Any]:
        return self._fields(cdi=bool(info.by_alias))

    def _fields(self, *, cdi: bool) -> dict[str, Any]:
        values = self.__dict__
        spelling = _CDI_SPELLING if cdi else {}
        return {
            spelling.get(k, k): list(v) if type(v) is tuple else v
            for k in self.__pydantic_fields_set__
            if (v := values[k]) is not None and v != ()
        }

    def to_cdi(self) -> dict[str, Any]:
        """The CDI JSON object (CDI's spelling, unset fields left out)."""
        return self._fields(cdi=True)


class CdiDeviceNode(_Cdi):
    """One CDI ``deviceNodes`` entry: a device node the container gets.

    ``path`` is where the container sees it (``/dev/nvidia0``). ``host_path`` is the node on
    the host; leave it unset and core sets it from the node's device root (``device_root``,
    ``docs/operating.md``): ``<device_root>/dev/nvidia0``, left out of the spec when the device
    root is ``/``. The container runtime reads type, major and minor from the host's node
    unless they are given; core refuses to write a spec whose host node is missing.

    Example: ``CdiDeviceNode(path="/dev/nvidia0")``, or the dict ``{"path": "/dev/nvidia0"}``
    (CDI's spelling, ``hostPath``, ``fileMode``, is accepted in dicts, as are the field names;
    anything else is an error naming the key).
    """

    path: CdiPath
    host_path: CdiPath | None = Field(default=None, alias="hostPath")

    type: Literal["c", "b", "u", "p"] | None = Field(
        default=None, description="c (char), b (block), u (unbuffered char), p (FIFO)"
    )
    major: int | None = Field(default=None, ge=0, le=_UINT32_MAX)
    minor: int | None = Field(default=None, ge=0, le=_UINT32_MAX)
    permissions: str | None = Field(
        default=None,
        pattern=r"^(r|rw|rwm|rm|w|wm|m)$",
        description="cgroup access: a subset of 'rwm'",
    )
    file_mode: int | None = Field(
        default=None, alias="fileMode", ge=0, le=0o7777, description="permission bits (0o666)"
    )
    uid: int | None = Field(default=None, ge=0, le=_UINT32_MAX)
    gid: int | None = Field(default=None, ge=0, le=_UINT32_MAX)

    def to_cdi(self) -> dict[str, Any]:
        """The CDI JSON object; a node given by its path alone (most are) the quickest."""
        if len(self.__pydantic_fields_set__) == 1:
            return {"path": self.path}
        return super().to_cdi()


class CdiMount(_Cdi):
    """One CDI ``mounts`` entry: ``host_path`` bind-mounted (by default) at ``container_path``."""

    host_path: str = Field(alias="hostPath", min_length=1, max_length=_MAX_CDI_PATH)
    container_path: CdiPath = Field(alias="containerPath")
    options: tuple[str, ...] = ()
    type: str | None = Field(default=None, min_length=1, description="e.g. bind, tmpfs")


class CdiHook(_Cdi):
    """One CDI ``hooks`` entry: an OCI hook the runtime runs at ``hook_name``."""

    hook_name: Literal[
        "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"
    ] = Field(alias="hookName")
    path: CdiPath
    args: tuple[str, ...] = ()
    env: tuple[EnvEntry, ...] = ()
    timeout: int | None = Field(default=None, gt=0, description="seconds")


class CdiEdits(_Frozen):
    """Container edits for one prepared device (a subset of CDI ``containerEdits``).

    Every entry is typed (:class:`CdiDeviceNode`, :class:`CdiMount`, :class:`CdiHook`, ``env``
    as ``NAME=value``) and unknown keys are refused, so a misspelt key fails the plugin's
    prepare with its name (``device_nodes.0.hostpath: Extra inputs are not permitted``) instead
    of going silently into the spec. Dicts in CDI's spelling are accepted where a model is
    expected.
    """

    env: tuple[EnvEntry, ...] = ()
    device_nodes: tuple[CdiDeviceNode, ...] = Field(default=(), alias="deviceNodes")
    mounts: tuple[CdiMount, ...] = ()
    hooks: tuple[CdiHook, ...] = ()

    def to_cdi(self) -> dict[str, Any]:
        """The CDI ``containerEdits`` JSON object (device nodes as given: no host path added)."""
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [d.to_cdi() for d in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_cdi() for m in self.mounts]
        if self.hooks:
            out["hooks"] = [h.to_cdi() for h in self.hooks]
        return out


class NetworkData(_Frozen):
    """``status.devices[].networkData`` of a ResourceClaim: what a network device became.

    Core writes it to the claim after a successful prepare (``interfaceName`` as the pod sees
    it, ``hardwareAddress``, ``ips`` in CIDR form).
    """

    interface_name: str | None = Field(default=None, alias="interfaceName", max_length=256)
    hardware_address: str | None = Field(default=None, alias="hardwareAddress", max_length=128)
    ips: tuple[str, ...] = ()

    def to_api(self) -> dict[str, Any]:
        """The ``resource.k8s.io/v1`` JSON form (unset fields left out)."""
        out: dict[str, Any] = self.model_dump(by_alias=True, exclude_none=True)
        if not self.ips:
            out.pop("ips", None)
        else:
            out["ips"] = list(self.ips)
        return out


class PreparedDevice(_Frozen):
    """What a plugin's prepare hook returns for one device.

    ``state`` is plugin-private JSON recorded in the checkpoint and handed back on unprepare
    (e.g. the CPUs chosen for the claim), so unprepare can undo exactly what prepare did.
    """

    request: str
    pool: str
    device: str
    edits: CdiEdits = CdiEdits()
    state: dict[str, Any] = Field(default_factory=dict)
    network_data: NetworkData | None = Field(
        default=None,
        alias="networkData",
        description="Written to the claim's status.devices[] after prepare (network devices)",
    )


class DeviceHealth(_Frozen):
    """The health of one device as a plugin reports it."""

    pool: str
    device: str
    health: Literal["Healthy", "Unhealthy", "Unknown"]
    message: str = ""
    last_updated: datetime


# --- kubelet service boundary (wire-neutral) ---------------------------------------------------


class ClaimRef(_Frozen):
    """A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    name: str
    uid: str


class PreparedDeviceRef(_Frozen):
    """One device of a prepared claim, as reported back to the kubelet."""

    requests: list[str]
    pool: str
    device: str
    cdi_device_ids: list[str]
    share_id: str | None = Field(
        default=None, description="The allocation's shareID for devices with multiple allocations"
    )


class ClaimPrepareResult(_Frozen):
    """The result of preparing one claim: devices, or an error string for this claim alone."""

    devices: list[PreparedDeviceRef] = Field(default_factory=list)
    error: str = ""


class ClaimUnprepareResult(_Frozen):
    """The result of unpreparing one claim: empty error on success."""

    error: str = ""


# --- enforcement through the container runtime (NRI; hook API 1.2) -----------------------------


class PodRef(_Frozen):
    """A pod as the container runtime names it: its UID, namespace and name."""

    uid: str
    namespace: str
    name: str


class PodSandboxView(_Frozen):
    """A pod sandbox as the runtime reports it to drakit's NRI plugin.

    ``netns`` is the path of the pod's network namespace (from the sandbox's Linux
    namespaces), ``None`` for a host-network pod; ``ips`` are the pod's addresses, when the
    runtime knows them.
    """

    id: str
    pod: PodRef
    netns: str | None = None
    ips: tuple[str, ...] = ()


class ContainerView(_Frozen):
    """A container as the runtime reports it to drakit's NRI plugin.

    ``cdi_devices`` are the fully qualified CDI device names the runtime injected into it
    (``vendor/class=name``), drakit's among them; core finds the container's devices from them.
    """

    id: str
    name: str
    pod: PodRef
    sandbox_id: str
    cdi_devices: tuple[str, ...] = ()


class ContainerResources(_Frozen):
    """What a plugin wants a container's cpuset to be; ``None`` in a field means no opinion."""

    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None
