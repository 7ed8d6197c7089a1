"""Rebuilding the checkpoint's claims from the CDI specs when the checkpoint was lost or damaged.

A claim that still has a CDI spec of this driver but no checkpoint record was prepared by an
earlier run: its record is rebuilt from the spec's CDI device names (``<claim uid>-<device>``,
:mod:`drakit.prepare.cdi`), so its devices stay held (an exclusive device is never prepared for
another claim; a shared one whose share is unknown is refused with a retryable error until the
recovered claim is unprepared; a spec whose devices cannot be attributed refuses every prepare
of the driver, retryably: see :meth:`drakit.prepare.pipeline.DriverState.prepare`). A device
whose edits carry :data:`ADMIN_ACCESS_ENV` was prepared for an adminAccess request: it holds
nothing, after the rebuild too.

A composed device (a GPU-NIC pair, a locked-in share: ``docs/composite.md``) holds its members
too, as its checkpoint record did (the members' prepares were recorded under their own
plugins): its members are the devices of the same pool that consume *the whole* of a counter
set the composed device consumes from (a pair's GPU and NIC, a share's CPU group; a share's
sibling shares consume parts and stay free). So after any damage to the checkpoint a lone claim
on a member of a recovered pair or share is refused, as while its record was intact.
:class:`~drakit.prepare.checkpoint.CheckpointStore` calls this as its ``recover`` callback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from fractions import Fraction

from drakit.host.inventory import InventorySnapshot
from drakit.models import DeviceKey, PreparedDeviceRef, quantity_value
from drakit.prepare.cdi import MAX_SPEC_BYTES, CdiWriter
from drakit.prepare.checkpoint import Checkpoint, ClaimPhase, ClaimRecord
from drakit.statefiles import NotRegular, read_regular

__all__ = ["ADMIN_ACCESS_ENV", "RECOVERED_ADMIN_REQUEST", "recover_claims"]

ADMIN_ACCESS_ENV = "DRA_ADMIN_ACCESS=true"
"""In the CDI edits of a device prepared for an adminAccess request (as dra-example-driver sets
it): the monitoring container learns it, and a rebuilt record knows the device holds nothing."""
RECOVERED_ADMIN_REQUEST = "<admin-access>"
"""The request a rebuilt record gives its adminAccess devices (the real names are not in the
spec), listed in its ``admin_requests`` so that those devices hold nothing."""


def _admin_devices(cdi: CdiWriter, uid: str) -> set[str]:
    """The CDI device names of a claim's spec whose edits carry :data:`ADMIN_ACCESS_ENV`."""
    try:
        raw = read_regular(cdi.cdi_dir / cdi.spec_name(uid), MAX_SPEC_BYTES)
        doc = json.loads(raw) if raw is not None else {}
        return {
            str(d["name"])
            for d in doc.get("devices") or []
            if ADMIN_ACCESS_ENV in ((d.get("containerEdits") or {}).get("env") or [])
        }
    except (NotRegular, ValueError, KeyError, TypeError, AttributeError, RecursionError, OSError):
        return set()


def _values(counters: Mapping[str, str]) -> dict[str, Fraction | None]:
    return {k: quantity_value(v) for k, v in counters.items()}


def members_of(snap: InventorySnapshot, driver: str) -> dict[DeviceKey, list[DeviceKey]]:
    """Composed device -> the member devices it holds (see the module docstring).

    A member consumes a whole counter set (every counter at the set's full value); a device
    that also consumes from that set is built from the member. Devices without counters, and
    the members themselves, are not in the result.
    """
    sets: dict[tuple[str, str], dict[str, Fraction | None]] = {}
    for spec in snap.pools:
        if spec.driver == driver:
            for cs in spec.counter_sets:
                sets[(spec.pool, cs.name)] = _values(cs.counters)
    whole: dict[tuple[str, str], list[DeviceKey]] = {}
    uses: dict[DeviceKey, list[tuple[str, str]]] = {}
    for key, _, dev in snap.devices():
        if key.driver != driver:
            continue
        for c in dev.consumes_counters:
            where = (key.pool, c.counter_set)
            uses.setdefault(key, []).append(where)
            if where in sets and _values(c.counters) == sets[where]:
                whole.setdefault(where, []).append(key)
    out: dict[DeviceKey, list[DeviceKey]] = {}
    for key, wheres in uses.items():
        members = [m for w in wheres for m in whole.get(w, []) if m != key]
        if members:
            out[key] = list(dict.fromkeys(members))
    return out


def recover_claims(
    cdi: CdiWriter,
    devices: Iterable[DeviceKey],
    cp: Checkpoint,
    snap: InventorySnapshot | None = None,
) -> dict[str, ClaimRecord]:
    """Records for claims that have a CDI spec of this driver but no checkpoint record.

    Args:
        cdi: the driver's CDI specs.
        devices: the devices this node publishes for the driver (the current inventory's).
        cp: the checkpoint as it could be read (empty when it was lost).
        snap: the inventory they come from; with it, a composed device's record holds its
            members too (:func:`members_of`).

    Returns:
        One recovered record per claim UID with a spec and no record; its results are the
        devices the spec's CDI device names attribute it to, or none when one name cannot be
        attributed (the claim then holds "something unknown").
    """
    out: dict[str, ClaimRecord] = {}
    missing = sorted(cdi.claim_uids() - set(cp.claims))
    if not missing:
        return out
    devices = list(devices)
    members = members_of(snap, devices[0].driver) if snap is not None and devices else {}
    names: dict[str, list[DeviceKey]] = {}
    for key in devices:
        names.setdefault(cdi.device_name("", key.device).lstrip("-_"), []).append(key)
    for uid in missing:
        results: list[PreparedDeviceRef] = []
        listed = cdi.read_devices(uid)
        admin = _admin_devices(cdi, uid) if listed else set()
        prefix = cdi.device_name(uid, "")
        for cdi_name in listed or []:
            rest = cdi_name[len(prefix) :] if cdi_name.startswith(prefix) else ""
            match = max(
                (n for n in names if rest == n or rest.startswith(n + "-")),
                key=len,
                default=None,
            )
            if match is None:
                results = []
                break
            results.extend(
                PreparedDeviceRef(
                    requests=[RECOVERED_ADMIN_REQUEST] if cdi_name in admin else [],
                    pool=k.pool,
                    device=k.device,
                    cdi_device_ids=[f"{cdi.kind}={cdi_name}"],
                )
                for k in names[match]
            )
            results.extend(  # the members a composed device holds (no CDI device of their own)
                PreparedDeviceRef(requests=[], pool=m.pool, device=m.device, cdi_device_ids=[])
                for k in names[match]
                for m in members.get(k, [])
            )
        out[uid] = ClaimRecord(
            namespace="",
            name="",
            uid=uid,
            phase=ClaimPhase.PREPARE_COMPLETED,
            results=results,
            cdi_spec=cdi.spec_name(uid),
            recovered=True,
            admin_requests=[RECOVERED_ADMIN_REQUEST] if admin and results else [],
        )
    return out
