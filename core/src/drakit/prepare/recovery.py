"""Rebuilding the checkpoint's claims from the CDI specs when the checkpoint was lost or damaged.

A claim that still has a CDI spec of this driver but no checkpoint record was prepared by an
earlier run: its record is rebuilt from the spec's CDI device names (``<claim uid>-<device>``,
:mod:`drakit.prepare.cdi`), so its devices stay held (an exclusive device is never prepared for
another claim; a shared one whose share is unknown is refused with a retryable error until the
recovered claim is unprepared; a spec whose devices cannot be attributed refuses every prepare
of the driver, retryably: see :meth:`drakit.prepare.pipeline.DriverState.prepare`). A device
whose edits carry :data:`ADMIN_ACCESS_ENV` was prepared for an adminAccess request: it holds
nothing, after the rebuild too.
:class:`~drakit.prepare.checkpoint.CheckpointStore` calls this as its ``recover`` callback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from drakit.models import DeviceKey, PreparedDeviceRef
from drakit.prepare.cdi import MAX_SPEC_BYTES, CdiWriter
from drakit.prepare.checkpoint import Checkpoint, ClaimPhase, ClaimRecord
from drakit.prepare.safefs import NotRegular, read_regular

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


def recover_claims(
    cdi: CdiWriter, devices: Iterable[DeviceKey], cp: Checkpoint
) -> dict[str, ClaimRecord]:
    """Records for claims that have a CDI spec of this driver but no checkpoint record.

    Args:
        cdi: the driver's CDI specs.
        devices: the devices this node publishes for the driver (the current inventory's).
        cp: the checkpoint as it could be read (empty when it was lost).

    Returns:
        One recovered record per claim UID with a spec and no record; its results are the
        devices the spec's CDI device names attribute it to, or none when one name cannot be
        attributed (the claim then holds "something unknown").
    """
    out: dict[str, ClaimRecord] = {}
    missing = sorted(cdi.claim_uids() - set(cp.claims))
    if not missing:
        return out
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
