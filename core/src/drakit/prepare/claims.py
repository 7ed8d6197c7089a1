"""Reading and checking the ResourceClaims of a kubelet call (steps 1-3 of the pipeline).

For each claim of a NodePrepareResources call (``docs/architecture.md``, "Prepare pipeline"):
GET the ResourceClaim, check its UID and allocation, take this driver's allocation results and
check every device is one this node published, and resolve opaque configuration (class entries
first, then claim entries, in allocation order; later wins), validated through the owning plugin
(the webhook uses the same hook). Every failure is the claim's own :class:`ClaimError`, naming the
claim and the field; :mod:`drakit.prepare.pipeline` takes the :class:`Planned` claims on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel

from drakit.errors import ConfigInvalid, DrakitError, PermanentError, RetryableError
from drakit.host.inventory import InventorySnapshot
from drakit.host.pluginhost import PluginHost
from drakit.models import AllocatedDevice, ClaimRef, DeviceKey
from drakit.prepare.device_status import entry_key
from drakit.prepare.faults import crash_point
from drakit.prepare.metadata import POD_CLAIM_NAME_ANNOTATION
from drakit.prepare.safefs import check_component

__all__ = [
    "DNS_SUBDOMAIN",
    "MAX_CONFIG_DEPTH",
    "MAX_OPAQUE_BYTES",
    "ClaimError",
    "ClaimReader",
    "ClaimSource",
    "Planned",
    "claim_ref_error",
    "describe",
    "show",
]

MAX_OPAQUE_BYTES = 10 * 1024
"""The API server's limit on one opaque parameters object; larger ones are refused here too."""

MAX_CONFIG_DEPTH = 32
"""How deeply an opaque parameters object may nest (objects and lists); deeper ones are refused."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_MAX_UID = 128
_MAX_SHOWN = 80


def show(value: str) -> str:
    """A value from input, cut for error messages (a 10 KB name is not echoed back)."""
    return value if len(value) <= _MAX_SHOWN else value[: _MAX_SHOWN - 3] + "..."


def claim_ref_error(ref: ClaimRef) -> str:
    """Why the kubelet's claim reference is unusable ("" if it is fine), naming the field."""
    who = f"claim {show(ref.namespace)}/{show(ref.name)}"
    if not _DNS_LABEL.fullmatch(ref.namespace):
        return (
            f"{who}: namespace {show(ref.namespace)!r} is not a Kubernetes namespace name "
            "(a lower-case DNS label of at most 63 characters)"
        )
    if len(ref.name) > 253 or not DNS_SUBDOMAIN.fullmatch(ref.name):  # noqa: PLR2004
        return (
            f"{who}: name {show(ref.name)!r} is not a ResourceClaim name "
            "(a lower-case DNS subdomain of at most 253 characters)"
        )
    try:
        check_component(ref.uid, "uid", max_bytes=_MAX_UID)
    except PermanentError as e:
        return f"{who}: {e}"
    return ""


def _too_deep(obj: object, limit: int) -> bool:
    """Whether ``obj`` nests objects/lists deeper than ``limit`` (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(obj, 1)]
    while stack:
        o, depth = stack.pop()
        if isinstance(o, dict):
            children: list[object] = list(o.values())
        elif isinstance(o, list):
            children = list(o)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def describe(ref: ClaimRef) -> str:
    """``claim <namespace>/<name>``: how errors and logs name a claim."""
    return f"claim {ref.namespace}/{ref.name}"


class ClaimSource(Protocol):
    """Where the pipeline GETs ResourceClaims (``drakit.kube.KubeClient`` in a node)."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The claim as JSON; raise PermanentError (not found) or RetryableError."""
        ...


class ClaimError(DrakitError):
    """A failure that belongs to one claim; its message is returned to the kubelet."""


@dataclass
class Planned:
    """One claim of a kubelet call, read and checked: its devices and which plugin owns each."""

    ref: ClaimRef
    devices: list[AllocatedDevice]
    owners: dict[str, list[AllocatedDevice]]
    status: frozenset[str] = frozenset()
    """This driver's ``status.devices`` entries as the claim GET saw them (canonical JSON)."""
    pod_claim_name: str | None = None
    """The pod's name for a claim made from its template (annotation
    ``resource.kubernetes.io/pod-claim-name``): where its device metadata files appear."""
    reserved_for: tuple[str, ...] = ()
    """The UIDs of the pods in the claim's ``status.reservedFor`` (NRI's pod -> claims map)."""


class ClaimReader:
    """Reads the claims of one driver's kubelet calls and checks them against the node.

    Args:
        driver: the DRA driver name.
        host: the plugin host (opaque configuration is validated by the owning plugin).
        claims: where ResourceClaims are read.
    """

    def __init__(self, driver: str, host: PluginHost, claims: ClaimSource) -> None:
        self.driver = driver
        self.host = host
        self.claims = claims

    def fetch(self, ref: ClaimRef, snap: InventorySnapshot) -> Planned | ClaimError:
        """Steps 1-3 for one claim: GET it and :meth:`plan` it; its error, whatever broke."""
        where = describe(ref)
        try:
            obj = self.claims.get_resource_claim(ref.namespace, ref.name)
            crash_point("prepare-after-get")
            return self.plan(ref, obj, snap)
        except ClaimError as e:
            return e
        except RetryableError as e:
            return ClaimError(f"{where}: cannot read the claim, will retry: {e}")
        except DrakitError as e:
            return ClaimError(f"{where}: {e}")
        except RecursionError:
            return ClaimError(
                f"{where}: the claim's JSON is nested too deeply (usually an opaque "
                "configuration in status.allocation.devices.config[].opaque.parameters); "
                f"at most {MAX_CONFIG_DEPTH} levels are accepted there"
            )
        except Exception as e:  # noqa: BLE001 - a malformed claim fails alone, whatever broke
            return ClaimError(f"{where}: malformed claim: {show(repr(e))}")

    def plan(self, ref: ClaimRef, obj: dict[str, Any], snap: InventorySnapshot) -> Planned:
        """Check the claim ``obj`` read for ``ref``; its devices, owners and configs (steps 2-3).

        Raises:
            ClaimError: the claim is not the one asked for, not allocated, or names a device,
                a share or a configuration this node refuses (naming the field).
        """
        where = describe(ref)
        uid = (obj.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"{where}: UID is {show(str(uid))}, the kubelet asked for {ref.uid} (the claim "
                "was replaced)"
            )
        alloc = ((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}
        if not (obj.get("status") or {}).get("allocation"):
            raise ClaimError(f"{where}: not allocated (status.allocation is empty)")
        raw = alloc.get("results") or []
        for i, r in enumerate(raw if isinstance(raw, list) else [raw]):
            if not isinstance(r, dict):
                raise ClaimError(
                    f"{where}: status.allocation.devices.results[{i}]: must be an object"
                )
        results = [r for r in raw if r.get("driver") == self.driver]
        configs = self.configs(where, alloc.get("config") or [])
        devices: list[AllocatedDevice] = []
        owners: dict[str, list[AllocatedDevice]] = {}
        for i, r in enumerate(results):
            request = str(r.get("request", ""))
            key = DeviceKey(
                driver=self.driver, pool=str(r.get("pool", "")), device=str(r.get("device", ""))
            )
            owner = snap.owner_of(key)
            if owner is None:
                raise ClaimError(
                    f"{where}: request {show(request)!r}: status.allocation.devices.results[{i}] "
                    f"names device {show(key.device)!r} in pool {show(key.pool)!r}, which this "
                    f"node does not publish for driver {self.driver}; the allocation is stale or "
                    "for another node"
                )
            base = request.split("/", 1)[0]
            field = f"status.allocation.devices.results[{i}]"
            share = r.get("shareID")
            if share is not None and (
                not isinstance(share, str) or not DNS_SUBDOMAIN.fullmatch(share)
            ):
                raise ClaimError(f"{where}: {field}.shareID {show(str(share))!r} is not a UID")
            capacity = r.get("consumedCapacity") or {}
            if not isinstance(capacity, dict):
                raise ClaimError(f"{where}: {field}.consumedCapacity must be an object")
            dev = AllocatedDevice(
                request=request,
                driver=self.driver,
                pool=key.pool,
                device=key.device,
                consumed_capacity={str(k): str(v) for k, v in capacity.items()},
                share_id=share,
                admin_access=bool(r.get("adminAccess")),
                config=tuple(
                    m for reqs, m in configs if not reqs or base in reqs or request in reqs
                ),
            )
            devices.append(dev)
            owners.setdefault(owner, []).append(dev)
        seen = (obj.get("status") or {}).get("devices") or []
        status = frozenset(
            entry_key(e)
            for e in (seen if isinstance(seen, list) else [])
            if isinstance(e, dict) and e.get("driver") == self.driver
        )
        return Planned(
            ref=ref,
            devices=devices,
            owners=owners,
            status=status,
            pod_claim_name=self.pod_claim_name(where, obj),
            reserved_for=reserved_pods(obj),
        )

    @staticmethod
    def pod_claim_name(where: str, obj: dict[str, Any]) -> str | None:
        """The claim's ``resource.kubernetes.io/pod-claim-name`` annotation, checked."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if not isinstance(annotations, dict):
            raise ClaimError(f"{where}: metadata.annotations must be an object")
        value = annotations.get(POD_CLAIM_NAME_ANNOTATION)
        if value is None:
            return None
        if not isinstance(value, str) or not _DNS_LABEL.fullmatch(value):
            raise ClaimError(
                f"{where}: metadata.annotations[{POD_CLAIM_NAME_ANNOTATION!r}] "
                f"{show(str(value))!r} is not a pod's claim name (a lower-case DNS label); it "
                "names the directory of the claim's device metadata files in its containers"
            )
        return value

    def configs(self, where: str, entries: list[Any]) -> list[tuple[set[str], BaseModel]]:
        """Validated opaque configs of this driver, class entries first, then claim entries."""
        if not isinstance(entries, list):
            raise ClaimError(f"{where}: status.allocation.devices.config must be a list")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("opaque") or {}, dict):
                raise ClaimError(
                    f"{where}: status.allocation.devices.config[{i}]"
                    f"{'' if not isinstance(entry, dict) else '.opaque'}: must be a JSON object"
                )
        ordered = sorted(
            enumerate(entries),
            key=lambda ie: (0 if ie[1].get("source") == "FromClass" else 1, ie[0]),
        )
        out: list[tuple[set[str], BaseModel]] = []
        for i, entry in ordered:
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") != self.driver:
                continue
            field = f"status.allocation.devices.config[{i}].opaque.parameters"
            source = "class" if entry.get("source") == "FromClass" else "claim"
            reqs = [str(r) for r in entry.get("requests") or []]
            scope = f"requests {show(str(reqs))}" if reqs else "all requests"
            params = opaque.get("parameters")
            if not isinstance(params, dict):
                raise ClaimError(f"{where}: {field} ({source}, {scope}): must be a JSON object")
            if _too_deep(params, MAX_CONFIG_DEPTH):
                raise ClaimError(
                    f"{where}: {field} ({source}, {scope}): nested deeper than "
                    f"{MAX_CONFIG_DEPTH} levels; flatten the configuration"
                )
            size = len(json.dumps(params, separators=(",", ":"), ensure_ascii=False).encode())
            if size > MAX_OPAQUE_BYTES:
                raise ClaimError(
                    f"{where}: {field} ({source}, {scope}): {size} bytes; at most "
                    f"{MAX_OPAQUE_BYTES} are allowed"
                )
            try:
                model = self.host.parse_config(self.driver, params)
            except ConfigInvalid as e:
                details = "; ".join(f"{p}: {m}" if p else m for p, m in e.errors)
                raise ClaimError(f"{where}: {field} ({source}, {scope}): {details}") from e
            out.append((set(reqs), model))
        return out


def reserved_pods(obj: dict[str, Any]) -> tuple[str, ...]:
    """The UIDs of the pods a claim is reserved for (``status.reservedFor``), sorted."""
    entries = (obj.get("status") or {}).get("reservedFor") or []
    if not isinstance(entries, list):
        return ()
    return tuple(
        sorted(
            {
                str(e["uid"])
                for e in entries
                if isinstance(e, dict) and e.get("resource") == "pods" and e.get("uid")
            }
        )
    )
