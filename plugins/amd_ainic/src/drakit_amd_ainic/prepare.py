"""Prepare and unprepare of AINIC devices: VF choice, VF settings, CDI edits, the ledger.

Order inside one prepare (every step may be cut by a kill):

1. repair: VFs the ledger gives to claims the checkpoint no longer holds (``held``) are reset,
   and on-demand VFs of idle PFs are removed;
2. choose a VF per share (``drakit_select_resources``, strategy ``selection``), creating the
   pool on demand when the PF has none; record every choice in the ledger (the intent);
3. apply VF settings through the netlink seam, then return the CDI edits.

The steps that change the host are :data:`CRASH_POINTS` (:func:`drakit.preparekit.crash_point`):
the crash tests kill the node with SIGKILL between any two.

A repeated prepare finds its choices in the ledger and repeats nothing else. Unprepare resets
the claim's VFs, forgets them, and removes on-demand VFs once their PF holds no share. A claim
of whole PFs only skips steps 1-2: neither its prepare nor its unprepare reads or writes the
ledger (an unprepare with nothing on record, after a kill mid-prepare, still looks).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drakit.errors import PermanentError, RetryableError
from drakit.models import (
    AllocatedDevice,
    CdiDeviceNode,
    CdiEdits,
    ClaimInfo,
    NetworkData,
    PreparedDevice,
)
from drakit.preparekit import crash_point, prepared_device, published_device, whole_quantity
from drakit.strategy_models import SelectionRequest, SelectionResult
from drakit_amd_ainic.config import merged
from drakit_amd_ainic.devices import BANDWIDTH, QUEUES, Published
from drakit_amd_ainic.discovery import Ainic, NicFunction, live_vf_addresses, read_vf
from drakit_amd_ainic.ledger import Assignment, Ledger, LedgerData
from drakit_amd_ainic.netlink import RESET, Netlink, VfSettings
from drakit_amd_ainic.settings import AmdAinicSettings
from drakit_amd_ainic.sriov import set_numvfs

__all__ = ["CRASH_POINTS", "ENV_PREFIX", "SELECTION_KIND", "Preparer", "env_prefix"]

CRASH_POINTS = (
    "ainic-after-pool-recorded",
    "ainic-after-vfs-created",
    "ainic-after-ledger",
    "ainic-after-vf-settings",
)
"""The steps of a VF share's prepare a ``kill -9`` may fall between (``DRAKIT_CRASH_AT``): the
on-demand pool recorded in the ledger before the kernel creates it; the VFs created; the
choice recorded; the VF's settings applied through netlink (its MTU and queues come after, and
unprepare restores them from the same record)."""

log = logging.getLogger(__name__)

ENV_PREFIX = "DRAKIT_AINIC_"
SELECTION_KIND = "ainic-vf"
"""``SelectionRequest.kind`` of the VF choice; ``options["loads"]`` maps VF index -> shares."""
RDMA_CM = "/dev/infiniband/rdma_cm"
_RDMA_CM_NODE = CdiDeviceNode(path=RDMA_CM)

Select = Callable[[str, SelectionRequest], SelectionResult]


_MAX_CONSUMED = 1 << 32
"""More queues or Gbit/s than any NIC has: a consumed amount above it is refused."""


def env_prefix(device: str, share_id: str | None = None) -> str:
    """``DRAKIT_AINIC_<DEVICE>[_<SHARE>]_`` (upper case, ``-`` -> ``_``, share hex digits)."""
    name = _env_device(device)
    if share_id:
        share = share_id.upper()
        if not (share.isascii() and share.isalnum()):
            share = _NOT_ENV.sub("", share)
        name += "_" + share
    return name + "_"


_NOT_ENV = re.compile(r"[^A-Z0-9]")


@functools.lru_cache(maxsize=1024)
def _env_device(device: str) -> str:
    return ENV_PREFIX + _NOT_ENV.sub("_", device.upper())


def _int_file(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return int(os.read(fd, 32))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _names_hold(fn: NicFunction) -> bool:
    """Whether ``fn``'s netdev and RDMA device still have the names they were read with."""
    if fn.ifname is None or not os.path.isdir(f"{fn.path}/net/{fn.ifname}"):
        return False
    return fn.rdma_device is None or os.path.isdir(f"{fn.path}/infiniband/{fn.rdma_device}")


@dataclass(frozen=True, slots=True)
class _Plan:
    dev: AllocatedDevice
    pub: Published
    where: str
    cfg: dict[str, Any]
    fn: NicFunction
    queues: int | None
    rate_gbps: int | None


class Preparer:
    """Owns the ledger and the VF pools; one per backend instance (thread-safe)."""

    def __init__(
        self,
        root: Path,
        settings: AmdAinicSettings,
        netlink: Netlink,
        ledger: Ledger,
        select: Select,
    ) -> None:
        self.root = root
        self.settings = settings
        self.netlink = netlink
        self.ledger = ledger
        self.select = select
        self._lock = threading.Lock()
        self._vf_cache: dict[tuple[str, int, str], NicFunction] = {}
        self._pools: dict[str, tuple[int, dict[int, str]]] = {}

    # -- prepare -------------------------------------------------------------------------------

    def prepare(
        self,
        published: Mapping[str, Published],
        claim: ClaimInfo,
        held: Sequence[PreparedDevice],
        held_claims: AbstractSet[str] = frozenset(),
    ) -> list[PreparedDevice]:
        """See the module docstring."""
        with self._lock:
            plans = [self._plan(published, claim, dev) for dev in claim.devices]
            if all(plan.pub.mode == "pf" for plan in plans):  # no VF: the ledger is not touched
                return [self._apply(claim, plan, plan.fn) for plan in plans]
            try:
                data = self.ledger.load()
                self._reconcile(data, held)
                live = {str(p.state.get("claim")) for p in held} | set(held_claims) | {claim.uid}
                self._repair(data, live)
                chosen = self._choose(data, claim, plans)
                return [
                    self._apply(claim, plan, fn) for plan, fn in zip(plans, chosen, strict=True)
                ]
            except BaseException:
                self.ledger.forget()  # changes in memory may not have been written
                raise

    def _plan(
        self, published: Mapping[str, Published], claim: ClaimInfo, dev: AllocatedDevice
    ) -> _Plan:
        where = f"request {dev.request!r} device {dev.device!r}"
        pub = published_device(published, dev.device, f"{where}: not an AINIC device on this node")
        cfg = merged(dev.config)
        queues: int | None = cfg.get("queues")
        rate: int | None = cfg.get("bandwidth")
        if pub.mode == "pf":
            for key, why in (
                ("vf", "sets a VF, and this device is a whole PF"),
                ("bandwidth", "limits a VF's transmit rate, and this device is a whole PF"),
            ):
                if key in cfg:
                    raise PermanentError(
                        f"{where}: NicConfig {key}: {why}; remove it, or claim a VF "
                        "(a device of type 'vf' or 'shared')"
                    )
        if pub.mode == "shared":
            got_q, got_b = (
                whole_quantity(
                    dev.consumed_capacity.get(name, "1"),
                    where,
                    name,
                    most=_MAX_CONSUMED,
                    holder="any NIC",
                )
                for name in (QUEUES, BANDWIDTH)
            )
            for key, asked, have, unit in (
                ("queues", queues, got_q, "queues"),
                ("bandwidth", rate, got_b, "Gbps"),
            ):
                if asked is not None and asked > have:
                    raise PermanentError(
                        f"{where}: NicConfig {key}: {asked} is more than the {have} {unit} this "
                        f"share was allocated; request capacity {key}: {asked} in the claim, or "
                        f"lower NicConfig {key}"
                    )
            queues = queues or got_q
            rate = rate or got_b
        return _Plan(dev, pub, where, cfg, pub.function, queues, rate)

    def _choose(self, data: LedgerData, claim: ClaimInfo, plans: list[_Plan]) -> list[NicFunction]:
        """A function per plan; the ledger is written once, if the claim changed a VF in it."""
        out: list[NicFunction] = []
        dirty = False
        for plan in plans:
            dev, pub = plan.dev, plan.pub
            key = (claim.uid, dev.request, dev.device, dev.share_id)
            mine = next((a for a in data.assignments if a.key() == key), None)
            if pub.mode == "pf":
                out.append(pub.function)
                continue
            if pub.mode == "vf":
                vf = pub.function
                if mine is None:
                    data.assignments.append(self._assignment(claim, dev, pub, vf))
                    dirty = True
                out.append(vf)
                continue
            vfs = self._live_vfs(pub.nic)
            if mine is not None and mine.vf in vfs:
                out.append(self._vf(plan, mine.vf, vfs[mine.vf]))
                continue
            if mine is not None:  # its VF is gone (pool recreated): choose again
                data.assignments.remove(mine)
                dirty = True
            vfs = self._grow_if_needed(data, plan, vfs)
            loads = {i: 0 for i in vfs}
            for a in data.assignments:
                if a.pf == pub.nic.pf.bdf and a.vf in loads:
                    loads[a.vf] += 1
            free = {i: n for i, n in loads.items() if n < self.settings.shares_per_vf}
            if not free:
                raise RetryableError(
                    f"{plan.where}: every VF of {pub.nic.pf.bdf} ({len(vfs)}) holds "
                    f"{self.settings.shares_per_vf} share(s); the allocation is ahead of the "
                    "node, the kubelet will retry once a share is released"
                )
            request = SelectionRequest(
                kind=SELECTION_KIND,
                count=1,
                available=frozenset(free),
                topology=None,
                options={"loads": free, "pf": pub.nic.pf.bdf},
            )
            try:
                units = self.select(self.settings.selection, request).units
            except PermanentError as e:
                raise PermanentError(f"{plan.where}: {e}") from e
            if len(units) != 1 or not units <= free.keys():
                raise PermanentError(
                    f"{plan.where}: selection strategy {self.settings.selection!r} returned "
                    f"{sorted(units)}, not one of the free VFs {sorted(free)}"
                )
            vf_index = next(iter(units))
            vf = self._vf(plan, vf_index, vfs[vf_index])
            data.assignments.append(self._assignment(claim, dev, pub, vf))
            dirty = True
            out.append(vf)
        if dirty:
            self.ledger.save(data)  # the intent, before any VF is touched
            crash_point("ainic-after-ledger")
        return out

    def _grow_if_needed(self, data: LedgerData, plan: _Plan, vfs: dict[int, str]) -> dict[int, str]:
        pub = plan.pub
        pf = pub.nic.pf.bdf
        if vfs:
            return vfs
        busy = any(a.pf == pf for a in data.assignments)
        if busy or not pub.vf_limit:
            raise RetryableError(
                f"{plan.where}: {pf} has no VFs and may not create any now"
                + (" (its pool is in use)" if busy else " (vf_limit is 0)")
            )
        data.on_demand.setdefault(pf, 0)
        self.ledger.save(data)  # record (and what is pending) before the kernel creates anything
        crash_point("ainic-after-pool-recorded")
        log.info("%s: creating %d VFs on demand", pf, pub.vf_limit)
        self._forget_pool(pf)
        set_numvfs(pub.nic.pf.dir, pub.vf_limit, timeout=self.settings.vf_ready_timeout)
        crash_point("ainic-after-vfs-created")
        return self._live_vfs(pub.nic)

    def _vf(self, plan: _Plan, index: int, bdf: str) -> NicFunction:
        """The VF as it was first read (its identity and the values unprepare restores).

        Read again when its netdev or RDMA device is no longer under that name: the kernel
        names a new VF's netdev ``eth<N>`` and its RDMA device ``ionic_<N>``, and udev renames
        both just after ``sriov_numvfs`` returns (rdma-core's ``rdma_rename``), so what was read
        right after a pool was created may be gone by the next prepare.
        """
        key = (plan.pub.nic.pf.bdf, index, bdf)
        vf = self._vf_cache.get(key)
        if vf is not None and not _names_hold(vf):
            vf = None
        if vf is None:
            vf = read_vf(self.root, plan.pub.nic, index, bdf)
            if vf is None:
                raise RetryableError(
                    f"{plan.where}: VF {index} ({bdf}) vanished while being chosen"
                )
            self._vf_cache[key] = vf
        return vf

    def _live_vfs(self, nic: Ainic) -> dict[int, str]:
        """VF index -> BDF as the PF has them now.

        One read of ``sriov_numvfs`` while the count is the one last listed: for a given
        NumVFs the VFs' routing IDs are fixed (the PF's First VF Offset and VF Stride, PCIe
        SR-IOV 9.3.3.9-10), so a pool removed and recreated at the same size has the same
        addresses; otherwise the ``virtfn`` links are listed again.
        """
        pf = nic.pf.bdf
        count = _int_file(f"{nic.pf.path}/sriov_numvfs")
        known = self._pools.get(pf)
        if known is not None and count is not None and known[0] == count:
            return known[1]
        vfs = live_vf_addresses(nic)
        if count is not None and len(vfs) == count:
            self._pools[pf] = (count, vfs)
        else:
            self._pools.pop(pf, None)  # changing under us: list again next time
        return vfs

    def _forget_pool(self, pf: str) -> None:
        """VFs of ``pf`` were created or removed: what was read about them is stale."""
        self._pools.pop(pf, None)
        for key in [k for k in self._vf_cache if k[0] == pf]:
            del self._vf_cache[key]

    @staticmethod
    def _assignment(
        claim: ClaimInfo, dev: AllocatedDevice, pub: Published, vf: NicFunction
    ) -> Assignment:
        return Assignment(
            claim=claim.uid,
            request=dev.request,
            device=dev.device,
            share=dev.share_id,
            pf=pub.nic.pf.bdf,
            vf=vf.vf_index if vf.vf_index is not None else -1,
        )

    def _apply(self, claim: ClaimInfo, plan: _Plan, fn: NicFunction) -> PreparedDevice:
        dev, pub = plan.dev, plan.pub
        state: dict[str, Any] = {
            "claim": claim.uid,
            "mode": pub.mode,
            "pf": pub.nic.pf.bdf,
            "function": fn.bdf,
        }
        vf_cfg: dict[str, Any] = plan.cfg.get("vf", {})
        netdev = Path(f"{fn.path}/net/{fn.ifname}") if fn.ifname else None
        if fn.vf_index is not None:
            pf_if = pub.nic.pf.ifname
            if pf_if is None:
                raise PermanentError(f"{plan.where}: PF {pub.nic.pf.bdf} has no netdev to set VFs")
            settings = VfSettings(
                mac=vf_cfg.get("mac"),
                vlan=vf_cfg.get("vlan"),
                trust=vf_cfg.get("trust"),
                spoofchk=vf_cfg.get("spoof_chk"),
                max_tx_rate_mbps=plan.rate_gbps * 1000 if plan.rate_gbps else None,
            )
            self.netlink.set_vf(pf_if, pub.nic.pf.bdf, fn.vf_index, settings)
            crash_point("ainic-after-vf-settings")
            state["vf"] = fn.vf_index
            # with pf and vf: what rebuilds a lost ledger (_reconcile), in this boot only
            if dev.share_id:
                state["share"] = dev.share_id
            if self.ledger.boot_id:
                state["boot"] = self.ledger.boot_id
        mtu = vf_cfg.get("mtu")
        if mtu is not None and fn.ifname and netdev is not None:
            pf_mtu = pub.nic.pf.mtu
            if fn.vf_index is not None and pf_mtu is not None and mtu > pf_mtu:
                raise PermanentError(
                    f"{plan.where}: NicConfig vf.mtu: {mtu} is above the PF's MTU {pf_mtu}; "
                    f"use at most {pf_mtu}"
                )
            self.netlink.set_mtu(fn.ifname, netdev, mtu)
            state["restore_mtu"] = fn.mtu
        if (
            plan.queues is not None
            and fn.ifname
            and netdev is not None
            and plan.queues != fn.queues
        ):
            self.netlink.set_channels(fn.ifname, netdev, plan.queues)
            state["restore_queues"] = fn.queues
        move = self._move(plan, fn)
        if move is not None:
            state["move"] = move
        queues = plan.queues if plan.queues is not None else fn.queues
        mac = vf_cfg.get("mac") or fn.mac
        prefix = env_prefix(dev.device, dev.share_id)
        env = [f"{prefix}PCI={fn.bdf}"]
        if fn.ifname:
            env.append(f"{prefix}IFNAME={fn.ifname}")
            state["ifname"] = fn.ifname
        if mac:
            state["mac"] = mac
        if queues:
            env.append(f"{prefix}QUEUES={'0' if queues == 1 else f'0-{queues - 1}'}")
            state["queues"] = queues
        nodes: list[CdiDeviceNode] = []
        if plan.cfg.get("rdma", True) and fn.rdma_device and fn.uverbs:
            nodes = [CdiDeviceNode(path=f"/dev/infiniband/{fn.uverbs}"), _RDMA_CM_NODE]
            env.append(f"{prefix}RDMA_DEVICE={fn.rdma_device}")
            env.append(f"{prefix}UVERBS=/dev/infiniband/{fn.uverbs}")
        return prepared_device(
            dev,
            edits=CdiEdits(env=tuple(env), device_nodes=tuple(nodes)),
            state=state,
            network_data=(
                NetworkData(interface_name=fn.ifname, hardware_address=mac) if fn.ifname else None
            ),
        )

    def _move(self, plan: _Plan, fn: NicFunction) -> dict[str, Any] | None:
        """What moves into the pod at sandbox start (``state["move"]``), or None.

        ``move_netdevs``: ``configured`` moves what ``NicConfig.interface`` asks for, ``always``
        every function with a netdev that one pod can own, ``never`` refuses ``interface``.
        """
        asked: dict[str, Any] | None = plan.cfg.get("interface")
        mode = self.settings.move_netdevs
        if asked is None and mode != "always":
            return None
        why = ""
        if mode == "never":
            why = (
                "moving netdevs into pods is off on this node (plugins.amd_ainic.move_netdevs: "
                "never); remove interface, or ask the node's operator for move_netdevs: configured"
            )
        elif not fn.ifname:
            why = f"function {fn.bdf} has no netdev (is it bound to ionic?); remove interface"
        elif (
            self.settings.rdma_netns_mode == "exclusive"
            and plan.cfg.get("rdma", True)
            and fn.rdma_device
        ):
            why = (
                f"the node's RDMA netns mode is exclusive, where RDMA device {fn.rdma_device} "
                "would have to move into the pod too, and drakit moves only netdevs; set "
                "rdma: {enabled: false}, or remove interface"
            )
        elif plan.pub.mode == "shared" and self.settings.shares_per_vf > 1:
            why = (
                f"this VF is shared by up to {self.settings.shares_per_vf} claims "
                "(shares_per_vf), and a netdev can be in one pod only; remove interface, or ask "
                "for shares_per_vf: 1"
            )
        if why:
            if asked is None:  # always: what cannot move stays in the host
                return None
            raise PermanentError(f"{plan.where}: NicConfig interface: {why}")
        move = dict(asked or {})
        mtu = move.get("mtu")
        pf_mtu = plan.pub.nic.pf.mtu
        if mtu is not None and fn.vf_index is not None and pf_mtu is not None and mtu > pf_mtu:
            raise PermanentError(
                f"{plan.where}: NicConfig interface.mtu: {mtu} is above the PF's MTU {pf_mtu}; "
                f"use at most {pf_mtu}"
            )
        return move

    # -- unprepare and repair ------------------------------------------------------------------

    def unprepare(self, claim_uid: str, prepared: Sequence[PreparedDevice]) -> None:
        """Reset the claim's VFs, forget them, remove on-demand VFs of idle PFs."""
        with self._lock:
            for p in prepared:  # PF-mode devices have no ledger entry; restore their channels
                if p.state.get("mode") == "pf":
                    self._restore_function(p.state)
            if prepared and all(p.state.get("mode") == "pf" for p in prepared):
                return  # whole PFs only: nothing in the ledger (an empty list may be a crash)
            try:
                data = self.ledger.load()
                restore = {
                    str(p.state.get("function")): p.state
                    for p in prepared
                    if p.state.get("function")
                }
                mine = [a for a in data.assignments if a.claim == claim_uid]
                for a in mine:
                    self._reset(a, restore)
                if mine:
                    data.assignments = [a for a in data.assignments if a.claim != claim_uid]
                    self.ledger.save(data)
                self._cleanup(data)
            except BaseException:
                self.ledger.forget()
                raise

    def _reconcile(self, data: LedgerData, held: Sequence[PreparedDevice]) -> None:
        """Put back every VF the checkpoint says a running claim holds and the ledger lacks.

        The ledger may have been lost, damaged (and moved aside) or replaced: the checkpoint's
        record of each prepared VF (its ``pf``, ``vf`` and ``boot`` in ``state``) is the other
        evidence, so a VF a running share holds is never chosen for another. VFs prepared in
        another boot are gone with it (a reboot's claims are prepared again).
        """
        have = {(a.claim, a.pf, a.vf) for a in data.assignments}
        boot = self.ledger.boot_id
        back: list[Assignment] = []
        for p in held:
            st = p.state
            claim, pf, vf = st.get("claim"), st.get("pf"), st.get("vf")
            if not (isinstance(claim, str) and isinstance(pf, str) and isinstance(vf, int)):
                continue
            if boot and st.get("boot") != boot:  # prepared in another boot: that VF is gone
                continue
            if (claim, pf, vf) in have:
                continue
            share = st.get("share")
            back.append(
                Assignment(
                    claim=claim,
                    request=p.request,
                    device=p.device,
                    share=share if isinstance(share, str) else None,
                    pf=pf,
                    vf=vf,
                )
            )
            have.add((claim, pf, vf))
        if not back:
            return
        why = f" ({self.ledger.damage})" if self.ledger.damage is not None else ""
        log.warning(
            "the VF ledger %s lacked %d VF(s) that running claims hold%s; rebuilt from the "
            "checkpoint: %s",
            self.ledger.path,
            len(back),
            why,
            ", ".join(f"{a.pf} VF {a.vf} (claim {a.claim})" for a in back[:10]),
        )
        data.assignments.extend(back)
        self.ledger.save(data)

    def _repair(self, data: LedgerData, live: set[str]) -> None:
        """Reset VFs of claims that are not ``live`` and drop them from the ledger."""
        stale = [a for a in data.assignments if a.claim not in live]
        for a in stale:
            log.warning(
                "VF %d of %s was left assigned to claim %s, which no longer holds it; resetting",
                a.vf,
                a.pf,
                a.claim,
            )
            self._reset(a, {})
        if stale:  # only after a crash; written before the pools are cleaned up
            data.assignments = [a for a in data.assignments if a.claim in live]
            self.ledger.save(data)
        self._cleanup(data)

    def _cleanup(self, data: LedgerData) -> None:
        idle = [pf for pf in data.on_demand if not any(a.pf == pf for a in data.assignments)]
        for pf in idle:
            pf_dir = self.root / "sys" / "bus" / "pci" / "devices" / pf
            log.info("%s: pool idle, removing its on-demand VFs", pf)
            self._forget_pool(pf)
            set_numvfs(pf_dir.resolve(), data.on_demand[pf], timeout=self.settings.vf_ready_timeout)
            del data.on_demand[pf]
            self.ledger.save(data)

    def _reset(self, a: Assignment, restore: Mapping[str, Mapping[str, Any]]) -> None:
        pf_dir = (self.root / "sys" / "bus" / "pci" / "devices" / a.pf).resolve()
        nets = list((pf_dir / "net").glob("*")) if (pf_dir / "net").is_dir() else []
        if not nets or a.vf < 0:
            return
        try:
            self.netlink.set_vf(nets[0].name, a.pf, a.vf, RESET)
        except (PermanentError, RetryableError) as e:
            log.warning("resetting VF %d of %s: %s", a.vf, a.pf, e)
        vf_dir = (pf_dir / f"virtfn{a.vf}").resolve()
        state = restore.get(vf_dir.name)
        if state is not None:
            self._restore_function(state)

    def _restore_function(self, state: Mapping[str, Any]) -> None:
        bdf, ifname = state.get("function"), state.get("ifname")
        if not bdf or not ifname:
            return
        netdev = (self.root / "sys" / "bus" / "pci" / "devices" / str(bdf)).resolve() / "net"
        netdev = netdev / str(ifname)
        if not netdev.is_dir():
            return
        try:
            if isinstance(state.get("restore_mtu"), int):
                self.netlink.set_mtu(str(ifname), netdev, state["restore_mtu"])
            if isinstance(state.get("restore_queues"), int) and state["restore_queues"] > 0:
                self.netlink.set_channels(str(ifname), netdev, state["restore_queues"])
        except (PermanentError, RetryableError) as e:
            log.warning("restoring %s: %s", ifname, e)
