"""The composite's prepare: each pair's GPU and NIC, each share's member, by their own backends.

The members prepare through ``context.members`` (never by import); the container gets their
CDI edits plus the pair's or the share's environment. Nothing of the composite's own is left
to undo: core unprepares the members it recorded for the claim.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from drakit.context import PluginContext
from drakit.errors import PermanentError
from drakit.models import AllocatedDevice, CdiEdits, ClaimInfo, PreparedDevice
from drakit.preparekit import prepared_device
from drakit_composite.devices import Owners
from drakit_composite.locked import Share
from drakit_composite.pairing import Pair

__all__ = ["prepare_devices"]


def _tag(device: str) -> str:
    return device.upper().replace("-", "_")


def _merged(edits: Sequence[CdiEdits], *env: str) -> CdiEdits:
    """The members' CDI edits in order, plus ``env``."""
    return CdiEdits(
        env=(*(e for x in edits for e in x.env), *env),
        device_nodes=tuple(n for x in edits for n in x.device_nodes),
        mounts=tuple(m for x in edits for m in x.mounts),
        hooks=tuple(h for x in edits for h in x.hooks),
    )


def prepare_devices(
    ctx: PluginContext,
    pairs: Mapping[str, tuple[Pair, Owners]],
    shares: Mapping[str, Share],
    claim: ClaimInfo,
) -> list[PreparedDevice]:
    """Prepare each pair's GPU and NIC, and each share's member, through their own backends.

    Each member backend prepares exactly what it prepares when its device is claimed alone
    (through ``context.members``, never by import), with the request's configs: a pair's
    GPU and NIC under the pair's request; a share as a share of its member device of the
    share's size (request ``<request>/<share>``, a share ID derived from the claim and the
    share, so a repeated prepare asks for the same). The container gets the members' CDI
    edits, plus ``DRAKIT_PAIR_<N>_GPU``/``_NIC`` with a pair's bus IDs or
    ``DRAKIT_<SHARE>_MEMBER`` with a share's member device. When a member fails, the
    members already prepared are unprepared before the error is raised.
    """
    wanted: dict[str, list[AllocatedDevice]] = {}  # member plugin -> its devices
    held: list[tuple[AllocatedDevice, Pair, Owners]] = []
    parts: list[tuple[AllocatedDevice, Share, str]] = []
    for dev in claim.devices:
        part = shares.get(dev.device)
        if part is not None:
            sub = f"{dev.request}/{dev.device}"
            parts.append((dev, part, sub))
            wanted.setdefault(part.plugin, []).append(
                dev.model_copy(
                    update={
                        "request": sub,
                        "device": part.member,
                        "share_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{claim.uid}/{sub}")),
                        "consumed_capacity": {part.capacity: part.amount},
                    }
                )
            )
            continue
        entry = pairs.get(dev.device)
        if entry is None:
            raise PermanentError(
                f"request {dev.request!r}: device {dev.device!r} is neither a GPU-NIC pair "
                "nor a locked-in share on this node"
            )
        pair, owners = entry
        held.append((dev, pair, owners))
        for plugin, member in ((owners.gpu, pair.gpu.name), (owners.nic, pair.nic.name)):
            wanted.setdefault(plugin, []).append(
                dev.model_copy(update={"device": member, "share_id": None})
            )
    done: list[tuple[str, list[PreparedDevice]]] = []
    try:
        for plugin, devs in wanted.items():
            sub_claim = claim.model_copy(update={"devices": tuple(devs)})
            done.append((plugin, ctx.members.prepare(plugin, sub_claim)))
    except Exception:
        for plugin, got in reversed(done):  # roll back; the failure is the claim's error
            try:
                ctx.members.unprepare(plugin, claim.uid, got)
            except Exception:  # the first error is the one to report
                ctx.log.exception(
                    "claim %s: rolling back %s failed; unprepare retries it", claim.uid, plugin
                )
        raise
    got_by = {(plugin, p.request, p.device): p for plugin, devices in done for p in devices}
    out = []
    for dev, pair, owners in held:
        gpu = got_by[(owners.gpu, dev.request, pair.gpu.name)]
        nic = got_by[(owners.nic, dev.request, pair.nic.name)]
        tag = _tag(dev.device)
        out.append(
            prepared_device(
                dev,
                edits=_merged(
                    (gpu.edits, nic.edits),
                    f"DRAKIT_{tag}_GPU={pair.gpu.pci.bdf}",
                    f"DRAKIT_{tag}_NIC={pair.nic.pci.bdf}",
                ),
                state={
                    "gpu": pair.gpu.name,
                    "nic": pair.nic.name,
                    "gpuPlugin": owners.gpu,
                    "nicPlugin": owners.nic,
                },
                network_data=nic.network_data,
            )
        )
    for dev, part, sub in parts:
        whole = got_by[(part.plugin, sub, part.member)]
        out.append(
            prepared_device(
                dev,
                edits=_merged((whole.edits,), f"DRAKIT_{_tag(dev.device)}_MEMBER={part.member}"),
                state={"member": part.member, "plugin": part.plugin, "amount": part.amount},
                network_data=whole.network_data,
            )
        )
    return out
