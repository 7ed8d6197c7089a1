"""From discovered AINICs to published devices: modes per PF, attributes, capacities, rails.

* ``pf``: device ``ainic-<n>`` is the whole NIC, exclusive.
* ``vf``: one exclusive device ``ainic-<n>-vf-<i>`` per existing VF (the PF is not published).
* ``shared``: device ``ainic-<n>`` with ``allowMultipleAllocations`` and consumable capacities
  ``queues``, ``bandwidth`` (Gbps) and ``vfs`` (places on the PF's VF pool), each with a
  request policy; prepare gives every share its own VF.
* ``none``: not published (left to another agent, e.g. the classic device plugin).

When the driver is shared with a composite backend (``docs/composite.md``),
:func:`with_counter_sets` makes every published PF (``pf`` and ``shared``) a counter set
``<nic>-counter-set`` that its device consumes whole and a GPU-NIC pair holding it consumes the
same. The scheduler charges a multi-allocatable device's counters once, when its first share is
allocated, and keeps them while any share is left, so a shared NIC and a pair exclude each other
without the shares excluding one another.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drakit.context import SkippedItems
from drakit.errors import ConfigInvalid, PermanentError
from drakit.models import (
    CounterConsumption,
    CounterSet,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    RequestPolicy,
    ValidRange,
    attribute,
)
from drakit.sysfs import standard_pci_attributes
from drakit_amd_ainic.discovery import Ainic, NicFunction, SysfsCache, read_vfs
from drakit_amd_ainic.settings import AmdAinicSettings, Mode

__all__ = [
    "BANDWIDTH",
    "QUEUES",
    "VFS",
    "DiscoveryCache",
    "Published",
    "build_devices",
    "modes",
    "pool_size",
    "topology_labels",
    "with_counter_sets",
]

log = logging.getLogger(__name__)

QUEUES, BANDWIDTH, VFS = "queues", "bandwidth", "vfs"


@dataclass(frozen=True, slots=True)
class Published:
    """What one published device stands for.

    Attributes:
        nic: the AINIC.
        mode: its mode.
        function: the PF (``pf``, ``shared``) or the VF (``vf``).
        vf_limit: ``shared``: most VFs the pool may have (created on demand up to it).
        on_demand: ``shared``: the PF had no VFs at discovery, so VFs are created on demand.
    """

    nic: Ainic
    mode: Mode
    function: NicFunction
    vf_limit: int = 0
    on_demand: bool = False


def _matches(nic: Ainic, select: Any) -> bool:
    ifname = nic.pf.ifname or ""
    return (
        nic.pf.bdf in select.pci_addresses
        or (bool(ifname) and ifname in select.pf_names)
        or any(fnmatch.fnmatchcase(ifname, g) for g in select.if_names if ifname)
    )


def modes(nics: list[Ainic], settings: AmdAinicSettings) -> dict[str, tuple[Mode, int | None]]:
    """PF BDF -> (mode, the rule's vf_limit); a PF selected by two rules is an error."""
    out: dict[str, tuple[Mode, int | None]] = {}
    for nic in nics:
        hits = [i for i, rule in enumerate(settings.nics) if _matches(nic, rule.select)]
        if len(hits) > 1:
            rules = " and ".join(f"plugins.amd_ainic.nics[{i}]" for i in hits)
            raise ConfigInvalid(
                [
                    (
                        f"plugins.amd_ainic.nics[{hits[1]}].select",
                        f"PF {nic.pf.bdf} ({nic.pf.ifname}) is selected by {rules}; a PF is in "
                        "exactly one mode, so narrow one of the selectors",
                    )
                ]
            )
        if hits:
            rule = settings.nics[hits[0]]
            out[nic.pf.bdf] = (rule.mode, rule.vf_limit)
        else:
            out[nic.pf.bdf] = (settings.default_mode, None)
    return out


_MAX_RAIL_DIGITS = 9
_MAX_RAIL = 10**_MAX_RAIL_DIGITS - 1
"""The largest rail a label may name (far beyond any fabric; well inside an int64 attribute)."""


def label_identity(
    settings: AmdAinicSettings, labels: Mapping[str, str], skipped: SkippedItems | None = None
) -> tuple[dict[str, int], dict[str, str], str | None]:
    """Rails and fabrics per ifName, and the node's fabric, from the Node's labels.

    ``<prefix>/rail.<ifName>=<rail>``, ``<prefix>/fabric.<ifName>=<fabric>`` and
    ``<prefix>/fabric=<fabric>`` (the prefix is ``plugins.amd_ainic.node_labels``). A label with
    a bad value is skipped with a warning naming it (and named in ``skipped``, reason
    ``bad-value``): one bad label does not stop discovery.
    """
    rails: dict[str, int] = {}
    fabrics: dict[str, str] = {}
    node_fabric: str | None = None
    prefix = settings.node_labels
    if prefix is None:
        return rails, fabrics, node_fabric
    for key, value in labels.items():
        domain, slash, name = key.partition("/")
        if not slash or domain != prefix:
            continue
        kind, dot, ifname = name.partition(".")
        if kind == "rail" and dot and ifname:
            # ASCII digits only ("²" and "٣" are digits to str.isdigit) and within a DRA int
            # attribute (int64): a label the API server accepts must not stop discovery
            if value.isascii() and value.isdigit() and len(value) <= _MAX_RAIL_DIGITS:
                rails[ifname] = int(value)
            else:
                log.warning(
                    "Node label %s=%r: a rail is a whole number from 0 to %d; ignored until "
                    "the fabric manager writes one",
                    key,
                    value[:70],
                    _MAX_RAIL,
                )
                if skipped is not None:
                    skipped.skip(
                        "label",
                        key,
                        "bad-value",
                        f"{value[:70]!r} is not a rail (a whole number from 0 to {_MAX_RAIL}); "
                        f"the label is ignored and {ifname} published without a rail until "
                        "the fabric manager writes one",
                    )
        elif kind == "fabric" and dot and ifname and value:
            fabrics[ifname] = value
        elif kind == "fabric" and not dot and value:
            node_fabric = value
    return rails, fabrics, node_fabric


def fabric_identity(
    settings: AmdAinicSettings,
    root: Path,
    labels: Mapping[str, str] | None = None,
    skipped: SkippedItems | None = None,
) -> tuple[dict[str, int], dict[str, str], str | None]:
    """Rail and fabric per PF BDF or ifName, and the node's fabric.

    Later wins: the topology file, the Node's labels (:func:`label_identity`), the static maps
    ``rails`` and ``fabrics``. The node's fabric: ``fabric``, else the ``<prefix>/fabric`` label.
    """
    rails: dict[str, int] = {}
    fabrics: dict[str, str] = {}
    if settings.topology_file:
        path = Path(settings.topology_file)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            log.warning("plugins.amd_ainic.topology_file %s does not exist (yet)", path)
            data = {}
        except (OSError, ValueError) as e:
            raise ConfigInvalid(
                [("plugins.amd_ainic.topology_file", f"{path} is not readable JSON: {e}")]
            ) from e
        if not isinstance(data, dict):
            raise ConfigInvalid(
                [
                    (
                        "plugins.amd_ainic.topology_file",
                        f"{path}: expected {{name: {{rail, fabric}}}}",
                    )
                ]
            )
        for key, entry in data.items():
            if isinstance(entry, dict):
                if isinstance(entry.get("rail"), int) and not isinstance(entry["rail"], bool):
                    rails[key] = entry["rail"]
                if isinstance(entry.get("fabric"), str):
                    fabrics[key] = entry["fabric"]
    label_rails, label_fabrics, node_fabric = label_identity(settings, labels or {}, skipped)
    rails.update(label_rails)
    fabrics.update(label_fabrics)
    rails.update(settings.rails)
    fabrics.update(settings.fabrics)
    return rails, fabrics, settings.fabric or node_fabric


FABRIC_LABEL = "topology.drakit.io/fabric"
RAILS_LABEL = "topology.drakit.io/rails"


def topology_labels(devices: Iterable[Device]) -> dict[str, str]:
    """The Node labels for this node's published NICs (``docs/multi-node.md``).

    ``topology.drakit.io/fabric``: the fabric every NIC that has one is in (left out when none
    has one, or when they are in different fabrics: a label holds one domain);
    ``topology.drakit.io/rails``: how many distinct rails the NICs of that fabric (of the node,
    without a fabric) are on. Both come from the ``fabric`` and ``rail`` attributes, so from
    the same sources as the ResourceSlice.
    """
    fabrics: set[str] = set()
    railed: list[tuple[int, str | None]] = []
    for d in devices:
        fabric_attr, rail_attr = d.attributes.get("fabric"), d.attributes.get("rail")
        fabric = fabric_attr.string if fabric_attr is not None else None
        if fabric is not None:
            fabrics.add(fabric)
        if rail_attr is not None and rail_attr.int_ is not None:
            railed.append((rail_attr.int_, fabric))
    out: dict[str, str] = {}
    if len(fabrics) > 1:
        log.warning(
            "this node's NICs are in fabrics %s: no %s label (it holds one domain); put the "
            "node's NICs in one fabric or schedule by the fabric attribute",
            ", ".join(sorted(fabrics)),
            FABRIC_LABEL,
        )
        return out
    fabric = next(iter(fabrics), None)
    if fabric is not None:
        out[FABRIC_LABEL] = fabric
    rails = {rail for rail, f in railed if f == fabric}
    if rails:
        out[RAILS_LABEL] = str(len(rails))
    return out


def pool_size(nic: Ainic, limit: int | None, settings: AmdAinicSettings) -> tuple[int, bool]:
    """``(VFs the shared pool may hold, whether they are created on demand)``."""
    if nic.vf_addresses:
        return len(nic.vf_addresses), False
    cap = settings.vf_limit if limit is None else limit
    size = nic.total_vfs if cap is None else min(cap, nic.total_vfs)
    return size, size > 0


class DiscoveryCache:
    """What one discovery round may reuse from the last: VF facts and unchanged devices.

    A device is rebuilt only when something it is made of (its attribute values, capacities)
    changed; otherwise the last round's :class:`Device` is published again. Rounds are serial.
    """

    def __init__(self) -> None:
        self.sysfs = SysfsCache()
        self._devices: dict[str, tuple[Any, Device]] = {}
        self._seen: set[str] = set()
        # validated attributes by value: values repeat across a node's functions (model,
        # driver, root, rail...); bools are not kept here (True == 1, see _BOOLS). This
        # round's and the last round's, so the cache holds what two rounds used and no more
        # (MACs and names come and go).
        self._attrs: dict[object, DeviceAttribute] = {}
        self._attrs_before = self._attrs

    def typed(self, attrs: Mapping[str, Any]) -> dict[str, DeviceAttribute]:
        """``attrs`` as validated attributes (each value validated once per two rounds)."""
        out: dict[str, DeviceAttribute] = {}
        now, before = self._attrs, self._attrs_before
        for name, value in attrs.items():
            if value is True or value is False:
                out[name] = _BOOLS[value]
                continue
            attr = now.get(value)
            if attr is None:
                attr = before.get(value)
                if attr is None:
                    attr = attribute(value)
                now[value] = attr
            out[name] = attr
        return out

    def device(self, name: str, key: Any, build: Callable[[], Device]) -> Device:
        """The last round's device ``name`` if it was made of ``key``; else ``build()``."""
        self._seen.add(name)
        hit = self._devices.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        dev = build()
        self._devices[name] = (key, dev)
        return dev

    def end_round(self, live_vfs: set[str]) -> None:
        """Forget devices and VFs this round did not see."""
        for name in [n for n in self._devices if n not in self._seen]:
            del self._devices[name]
        self._seen = set()
        self._attrs_before, self._attrs = self._attrs, {}
        self.sysfs.prune(live_vfs)


_BOOLS = {v: DeviceAttribute(bool=v) for v in (True, False)}
"""The two bool attributes (apart from the cache by value: ``True == 1``)."""


def _attributes(
    nic: Ainic, fn: NicFunction, kind: str, rail: int | None, fabric: str | None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "type": kind,
        "model": nic.model,
        "pciVendorID": f"{fn.pci.vendor:04x}",
        "pciDeviceID": f"{fn.pci.device:04x}",
        "rdma": fn.rdma_device is not None,
        "pfName": nic.pf.ifname or nic.pf.bdf,
        **standard_pci_attributes(fn.pci),
    }
    if fn.pci.driver:
        attrs["kernelDriver"] = fn.pci.driver
    if fn.ifname:
        attrs["ifName"] = fn.ifname
    if fn.mac:
        attrs["mac"] = fn.mac
    if fn.mtu is not None:
        attrs["mtu"] = fn.mtu
    if fn.speed_mbps:
        attrs["linkSpeedGbps"] = fn.speed_mbps // 1000
    if fn.rdma_device:
        attrs["rdmaDevice"] = fn.rdma_device
    fw = fn.fw_version or nic.pf.fw_version
    if fw:
        attrs["firmwareVersion"] = fw
    if fn.vf_index is not None:
        attrs["vfIndex"] = fn.vf_index
        attrs["pfPciAddress"] = nic.pf.bdf
    elif nic.total_vfs:
        attrs["sriovTotalVFs"] = nic.total_vfs
    if rail is not None:
        attrs["rail"] = rail
    if fabric is not None:
        attrs["fabric"] = fabric
    return attrs


def _policy(default: int, lo: int, hi: int, step: int) -> RequestPolicy:
    default = max(lo, min(default, hi))
    return RequestPolicy(
        default=str(default),
        valid_range=ValidRange(min=str(lo), max=str(hi), step=str(step) if step > 1 else None),
    )


def _left_out(skipped: SkippedItems | None, nic: Ainic, why: str) -> None:
    """Log and name a NIC whose devices are not published."""
    log.warning("%s (%s) is not published: %s", nic.name, nic.pf.bdf, why)
    if skipped is not None:
        skipped.skip(
            "device", nic.name, "refused-attribute", f"{nic.pf.bdf} is not published: {why[:600]}"
        )


def build_devices(
    nics: list[Ainic],
    settings: AmdAinicSettings,
    root: Path,
    cache: DiscoveryCache | None = None,
    labels: Mapping[str, str] | None = None,
    moved: Mapping[str, NicFunction] | None = None,
    skipped: SkippedItems | None = None,
) -> tuple[list[Device], dict[str, Published]]:
    """The devices to publish and what each stands for (by device name).

    ``cache`` carries what the last round read and built (:class:`DiscoveryCache`); ``labels``
    are the Node's (rails and fabrics a fabric manager wrote, :func:`label_identity`);
    ``moved`` are functions whose netdev is in a pod's network namespace (BDF -> the function
    as last read in the host): the host's sysfs does not show such a netdev, so the function is
    published as it was read before the move, not without its netdev; ``skipped`` names each
    NIC and label left out.
    """
    moved = moved or {}
    cache = cache if cache is not None else DiscoveryCache()
    live_vfs: set[str] = set()
    chosen = modes(nics, settings)
    rails, fabrics, node_fabric = fabric_identity(settings, root, labels, skipped)
    devices: list[Device] = []
    published: dict[str, Published] = {}

    def ident(nic: Ainic) -> tuple[int | None, str | None]:
        keys = (nic.pf.bdf, nic.pf.ifname or "")
        rail = next((rails[k] for k in keys if k in rails), None)
        fabric = next((fabrics[k] for k in keys if k in fabrics), node_fabric)
        return rail, fabric

    def add(nic: Ainic) -> None:
        mode, limit = chosen[nic.pf.bdf]
        if nic.pf.ifname is None and nic.pf.bdf in moved:
            nic = replace(nic, pf=moved[nic.pf.bdf])
        rail, fabric = ident(nic)
        if mode == "none":
            return
        if mode == "vf":
            vfs = read_vfs(root, nic, cache=cache.sysfs)
            vfs = tuple(moved.get(vf.bdf, vf) if vf.ifname is None else vf for vf in vfs)
            live_vfs.update(vf.bdf for vf in vfs)
            if not vfs:
                log.warning(
                    "%s (%s) is in vf mode but has no VFs (sriov_numvfs is 0); nothing published",
                    nic.name,
                    nic.pf.bdf,
                )
            for vf in vfs:
                name = f"{nic.name}-vf-{vf.vf_index}"
                devices.append(
                    _plain_device(cache, name, _attributes(nic, vf, "vf", rail, fabric), vf)
                )
                published[name] = Published(nic=nic, mode="vf", function=vf)
            return
        if mode == "pf":
            attrs = _attributes(nic, nic.pf, "pf", rail, fabric)
            devices.append(_plain_device(cache, nic.name, attrs, nic.pf))
            published[nic.name] = Published(nic=nic, mode="pf", function=nic.pf)
            return
        size, on_demand = pool_size(nic, limit, settings)
        gbps = (nic.pf.speed_mbps or 0) // 1000
        if size == 0 or nic.pf.queues == 0 or gbps == 0:
            log.warning(
                "%s (%s) is in shared mode but has %d VFs possible, %d queues, %d Gbps; "
                "not published",
                nic.name,
                nic.pf.bdf,
                size,
                nic.pf.queues,
                gbps,
            )
            return
        q, b = settings.queues, settings.bandwidth_gbps
        slots = size * settings.shares_per_vf
        capacity = {
            QUEUES: DeviceCapacity(
                value=str(nic.pf.queues),
                request_policy=_policy(q.default, q.min, nic.pf.queues, q.step),
            ),
            BANDWIDTH: DeviceCapacity(
                value=str(gbps), request_policy=_policy(b.default, b.min, gbps, b.step)
            ),
            VFS: DeviceCapacity(
                value=str(slots),
                request_policy=RequestPolicy(default="1", valid_values=("1",)),
            ),
        }
        devices.append(
            Device(
                name=nic.name,
                attributes=cache.typed(_attributes(nic, nic.pf, "shared", rail, fabric)),
                capacity=capacity,
                allow_multiple_allocations=True,
            )
        )
        published[nic.name] = Published(
            nic=nic, mode="shared", function=nic.pf, vf_limit=size, on_demand=on_demand
        )

    for nic in nics:
        # one NIC whose attributes drakit refuses (a netdev name over 64 bytes, ...) is skipped
        # and named; the backend publishes the others
        n_dev, n_pub = len(devices), dict(published)
        try:
            add(nic)
        except (ValueError, PermanentError) as e:
            del devices[n_dev:]
            published.clear()
            published.update(n_pub)
            why = " ".join(line.strip() for line in str(e).splitlines()[:2])
            _left_out(skipped, nic, why)
    cache.end_round(live_vfs)
    return devices, published


def _plain_device(
    cache: DiscoveryCache, name: str, attrs: dict[str, Any], fn: NicFunction
) -> Device:
    """An exclusive device (a PF or a VF): its attributes and plain capacities."""
    # the dict itself (of plain values: untracked by the garbage collector, so a 2,048-VF round
    # does not allocate 40,000 tracked tuples), not its items
    key = (attrs, fn.queues, fn.speed_mbps)
    return cache.device(
        name,
        key,
        # validated part by part: every attribute and capacity is a validated model (cached by
        # value), the name a str, the rest the template's defaults; ``Device(...)`` would run
        # every attribute's validator again, which was most of a 2,048-VF node's first round
        lambda: _EXCLUSIVE.model_copy(
            update={
                "name": name,
                "attributes": cache.typed(attrs),
                "capacity": _plain_capacity(fn),
            }
        ),
    )


_EXCLUSIVE = Device(name="exclusive")
"""A validated device with every field but name, attributes and capacity at its default."""


def with_counter_sets(
    devices: list[Device], published: Mapping[str, Published]
) -> tuple[list[Device], list[CounterSet]]:
    """``devices`` with every PF (``pf``, ``shared``) consuming a counter set of its own, whole.

    The set holds the PF's ``bandwidth`` in Gbps (one ``nic`` when the link speed is unknown).
    """
    out: list[Device] = []
    sets: list[CounterSet] = []
    for dev in devices:
        what = published.get(dev.name)
        if what is None or what.mode not in ("pf", "shared"):
            out.append(dev)
            continue
        gbps = (what.function.speed_mbps or 0) // 1000
        counters = {BANDWIDTH: str(gbps)} if gbps else {"nic": "1"}
        cs = CounterSet(name=f"{dev.name}-counter-set", counters=counters)
        sets.append(cs)
        use = CounterConsumption(counter_set=cs.name, counters=dict(counters))
        out.append(dev.model_copy(update={"consumes_counters": (use,)}))
    return out, sets


@functools.lru_cache(maxsize=1024)
def _capacity(value: int) -> DeviceCapacity:
    """A plain capacity; the same few values repeat across a node's functions."""
    return DeviceCapacity(value=str(value))


def _plain_capacity(fn: NicFunction) -> dict[str, DeviceCapacity]:
    out: dict[str, DeviceCapacity] = {}
    if fn.queues:
        out[QUEUES] = _capacity(fn.queues)
    if fn.speed_mbps:
        out[BANDWIDTH] = _capacity(fn.speed_mbps // 1000)
    return out
