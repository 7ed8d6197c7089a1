"""A claim's netdev in its pod: moved in at sandbox start, back at stop, journaled throughout.

``drakit_pod_sandbox_start`` (drakit's NRI plugin, at RunPodSandbox) moves each prepared
function whose ``state`` carries ``move`` (the claim's ``NicConfig.interface``, or every
function under ``move_netdevs: always``) into the pod's network namespace, renamed and set up as
asked; ``drakit_pod_sandbox_stop`` and unprepare move it back under its host name with its host
MTU, addresses and up/down state. :mod:`drakit_amd_ainic.netns` does the rtnetlink requests.

Crash safety: the journal (``<state-dir>/plugin_state/amd_ainic/netdev-moves.json``, a
:class:`drakit.statefiles.StateFile`) holds one entry per moved function, written *before* each
step with the step about to run (``phase``) and what the host had (name, MAC, ifindex, MTU, up
state, addresses). A kill between any two steps leaves an entry that says which step may have
run; :meth:`PodNetwork.recover` (at every health poll of the node, the first one right after
it starts, and before each hook) finishes it: forward while the pod's namespace lives and the
entry was on its way in, back otherwise. Every step is safe to repeat: the netdev is looked up
(by name and MAC) where the step left it or did not.

A namespace that died while the netdev was in it: the kernel gives a physical netdev (a PF or a
VF) back to the host's namespace, keeping its pod name unless the host has one such (then
``dev<ifindex>``); :meth:`PodNetwork.recover` finds it under either (with the recorded MAC)
and renames and restores it. A virtual netdev (veth, as the tests use) dies with the namespace;
its entry is dropped with a warning.

The journal lasts one boot (a reboot returns every netdev): an entry written in another boot
is dropped.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import PermanentError, RetryableError
from drakit.models import NetworkData, PodSandboxView, PreparedDevice
from drakit.statefiles import Damage, StateDir, StateFile, quarantine
from drakit_amd_ainic.netns import HostNetns, LinkInfo, Mover, NetnsGone, PodNetns

__all__ = ["CRASH_POINTS", "JOURNAL_FILE", "Move", "PodNetwork"]

log = logging.getLogger(__name__)

JOURNAL_FILE = "netdev-moves.json"
_KIND = "AinicNetdevMoves"

CRASH_POINTS = (
    "netdev-after-journal",
    "netdev-after-move-in",
    "netdev-after-configure",
    "netdev-after-move-out",
    "netdev-after-restore",
)
"""Where a crash test may kill ``drakit node`` (``DRAKIT_CRASH_AT``, as core's crash points)."""

_WANTED = frozenset(p for p in os.environ.get("DRAKIT_CRASH_AT", "").split(",") if p)


def _crash_point(name: str) -> None:
    if name in _WANTED:
        os.kill(os.getpid(), signal.SIGKILL)


Phase = Literal["moving-in", "in", "moving-out"]


class Move(BaseModel):
    """One function's netdev on its way into, in, or on its way out of a pod's namespace."""

    model_config = ConfigDict(extra="forbid")

    function: str = Field(description="PCI address (the key)")
    claim: str
    device: str
    sandbox: str = Field(description="The runtime's sandbox id")
    pod: str = Field(description="namespace/name, for messages")
    netns: str = Field(description="The pod's network namespace path")
    netns_inode: int = Field(description="Its nsfs inode: a reused path is another namespace")
    host_name: str
    pod_name: str
    mac: str | None
    index: int = Field(description="ifindex in the host before the move")
    host_mtu: int | None = None
    host_up: bool = False
    host_addresses: tuple[str, ...] = ()
    mtu: int | None = Field(default=None, description="MTU in the pod (None: unchanged)")
    addresses: tuple[str, ...] = ()
    phase: Phase


class _JournalData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    moves: dict[str, Move] = Field(default_factory=dict)
    boot_id: str = ""


class _Journal:
    """The journal file, read once and kept in memory (this process is its only writer)."""

    def __init__(self, state: StateDir, boot_id: str) -> None:
        self.state = state
        self.boot_id = boot_id
        self._file: StateFile | None = None
        self._data: _JournalData | None = None
        self.damage: Damage | None = None

    @property
    def file(self) -> StateFile:
        if self._file is None:
            self._file = self.state.file(JOURNAL_FILE, kind=_KIND)
        return self._file

    def load(self) -> dict[str, Move]:
        if self._data is None:
            self._data = self._read()
        return self._data.moves

    def _read(self) -> _JournalData:
        raw = self.file.read()
        self.damage = self.file.damage
        if raw is None:
            return _JournalData(boot_id=self.boot_id)
        try:
            data = _JournalData.model_validate(raw)
        except ValidationError as e:
            first = str(e).splitlines()[1:2] or ["invalid"]
            path = self.file.path
            self.damage = Damage(path, f"not a netdev journal: {first[0]}", quarantine(path))
            log.error("%s", self.damage)
            return _JournalData(boot_id=self.boot_id)
        if data.boot_id and self.boot_id and data.boot_id != self.boot_id:
            if data.moves:
                log.warning(
                    "the node rebooted since the netdev journal was written: its %d move(s) "
                    "(%s) ended with the boot; every netdev is in the host",
                    len(data.moves),
                    ", ".join(sorted(data.moves)),
                )
            return _JournalData(boot_id=self.boot_id)
        return data

    def save(self) -> None:
        data = self._data if self._data is not None else _JournalData()
        data.boot_id = self.boot_id
        try:
            self.file.write(data.model_dump(mode="json"))
        except BaseException:
            self._data = None  # the file is the truth: read it again next time
            raise

    def put(self, move: Move) -> None:
        self.load()[move.function] = move
        self.save()

    def drop(self, function: str) -> None:
        if self.load().pop(function, None) is not None:
            self.save()


def _wanted_move(dev: PreparedDevice) -> Mapping[str, Any] | None:
    move = dev.state.get("move")
    if isinstance(move, Mapping) and dev.state.get("function") and dev.state.get("ifname"):
        return move
    return None


class PodNetwork:
    """Moves, journal and recovery (see the module docstring); thread-safe (one lock)."""

    def __init__(self, state: StateDir, boot_id: str = "", mover: Mover | None = None) -> None:
        self.journal = _Journal(state, boot_id)
        self.mover = mover or Mover()
        self._lock = threading.Lock()

    # -- hooks ---------------------------------------------------------------------------------

    def start(
        self, sandbox: PodSandboxView, claim_uid: str, devices: Sequence[PreparedDevice]
    ) -> list[PreparedDevice] | None:
        """Move the claim's netdevs into the sandbox's namespace; the devices' new networkData.

        ``None`` when none of ``devices`` asks for a move. Idempotent: a netdev already in this
        sandbox is configured again (a no-op) and reported.

        Raises:
            PermanentError: host-network pod; the pod's namespace refused the name, MTU or an
                address (the move is undone).
            RetryableError: the namespace is gone, or the netdev is in another pod still.
        """
        wanted = [(d, m) for d in devices if (m := _wanted_move(d)) is not None]
        if not wanted:
            return None
        pod = f"{sandbox.pod.namespace}/{sandbox.pod.name}"
        if not sandbox.netns:
            d, _ = wanted[0]
            raise PermanentError(
                f"claim {claim_uid} device {d.device!r}: NicConfig interface moves the netdev into "
                f"the pod's network namespace, and pod {pod} uses the host's network "
                "(hostNetwork: true); run the pod without hostNetwork, or remove interface from "
                "the claim's NicConfig"
            )
        with self._lock:
            self._recover_locked()
            try:
                ns = PodNetns(sandbox.netns)
            except NetnsGone as e:
                raise RetryableError(f"pod {pod}: its network namespace is gone ({e})") from e
            moved: list[str] = []
            out: list[PreparedDevice] = []
            try:
                with ns:
                    for dev, move in wanted:
                        info = self._move_in(ns, sandbox, pod, claim_uid, dev, move)
                        moved.append(str(dev.state["function"]))
                        data = NetworkData(
                            interface_name=info.name,
                            hardware_address=info.mac,
                            ips=tuple(move.get("addresses") or ()),
                        )
                        out.append(dev.model_copy(update={"network_data": data}))
            except BaseException:
                for fn in moved:  # all or nothing: the sandbox creation fails and is retried
                    entry = self.journal.load().get(fn)
                    if entry is not None:
                        self._return_quietly(entry)
                raise
        return out

    def stop(self, sandbox: PodSandboxView | None, claim_uid: str) -> None:
        """Move the claim's netdevs back from ``sandbox`` (``None`` or no id: from any sandbox).

        Core sends a sandbox without an id at NRI Synchronize for a pod whose sandbox is gone.

        Tolerant: a netdev already back, or a namespace that is gone, is no error; a netdev
        whose return fails is logged and left in the journal for the next :meth:`recover`.
        """
        with self._lock:
            self._recover_locked()
            for entry in list(self.journal.load().values()):
                if entry.claim != claim_uid:
                    continue
                if sandbox is not None and sandbox.id and entry.sandbox != sandbox.id:
                    continue  # another pod's sandbox (an empty id: the pod's sandbox is gone)
                self._return_quietly(entry)

    def recover(self) -> None:
        """Finish every half-done step; bring back netdevs from namespaces that died."""
        with self._lock:
            self._recover_locked()

    def moved(self) -> dict[str, Move]:
        """Function BDF -> its move, as the journal has it now."""
        with self._lock:
            return dict(self.journal.load())

    # -- steps ---------------------------------------------------------------------------------

    def _recover_locked(self) -> None:
        for entry in list(self.journal.load().values()):
            try:
                self._recover_one(entry)
            except (PermanentError, RetryableError, OSError) as e:
                log.warning(
                    "netdev %s (%s, claim %s): recovery failed, retried later: %s",
                    entry.host_name,
                    entry.function,
                    entry.claim,
                    e,
                )

    def _recover_one(self, entry: Move) -> None:
        if entry.phase == "moving-out":
            self._return(entry)
            return
        ns = self._open(entry)
        if ns is None:  # the pod's namespace died with the netdev in it (or on its way)
            log.warning(
                "netdev %s (%s) was in pod %s's network namespace, which is gone; returning it",
                entry.pod_name,
                entry.function,
                entry.pod,
            )
            self._return(entry)
            return
        with ns:
            if entry.phase != "in":
                log.warning(
                    "netdev %s (%s): finishing its move into pod %s, cut at %s",
                    entry.host_name,
                    entry.function,
                    entry.pod,
                    entry.phase,
                )
                self._forward(ns, entry)

    def _open(self, entry: Move) -> PodNetns | None:
        try:
            ns = PodNetns(entry.netns)
        except NetnsGone:
            return None
        if ns.inode != entry.netns_inode:  # the path now names another namespace
            ns.close()
            return None
        return ns

    def _move_in(
        self,
        ns: PodNetns,
        sandbox: PodSandboxView,
        pod: str,
        claim_uid: str,
        dev: PreparedDevice,
        move: Mapping[str, Any],
    ) -> LinkInfo:
        fn = str(dev.state["function"])
        host_name = str(dev.state["ifname"])
        pod_name = str(move.get("name") or host_name)
        where = f"claim {claim_uid} device {dev.device!r} ({fn})"
        entry = self.journal.load().get(fn)
        if entry is not None:
            if entry.claim == claim_uid and entry.netns_inode == ns.inode:
                return self._forward(ns, entry)  # this sandbox already: idempotent
            # in another sandbox whose namespace still lives (recovery returned dead ones)
            raise RetryableError(
                f"{where}: its netdev is in pod {entry.pod}'s network namespace; a netdev is in "
                "one pod at a time (a claim shared by several pods cannot move it), retried "
                "when that pod's sandbox stops"
            )
        link = self.mover.find(None, [host_name], None)
        if link is None:
            raise RetryableError(
                f"{where}: netdev {host_name} is not in the host's network namespace"
            )
        addresses = tuple(str(a) for a in move.get("addresses") or ())
        mtu = move.get("mtu")
        entry = Move(
            function=fn,
            claim=claim_uid,
            device=dev.device,
            sandbox=sandbox.id,
            pod=pod,
            netns=ns.path,
            netns_inode=ns.inode,
            host_name=link.name,
            pod_name=pod_name,
            mac=link.mac,
            index=link.index,
            host_mtu=link.mtu,
            host_up=link.up,
            host_addresses=link.addresses,
            mtu=mtu if isinstance(mtu, int) else None,
            addresses=addresses,
            phase="moving-in",
        )
        self.journal.put(entry)
        _crash_point("netdev-after-journal")
        return self._forward(ns, entry)

    def _forward(self, ns: PodNetns, entry: Move) -> LinkInfo:
        """Take ``entry`` to ``in``: move (if still in the host), configure; undo on refusal."""
        where = f"claim {entry.claim} device {entry.device!r} ({entry.function})"
        if entry.phase == "moving-in":
            link = self.mover.find(None, [entry.host_name], entry.mac, entry.index)
            if link is not None:
                taken = self.mover.find(ns, [entry.pod_name], None)
                if taken is not None:
                    self.journal.drop(entry.function)  # nothing moved
                    raise PermanentError(
                        f"{where}: NicConfig interface.name: {entry.pod_name!r} is taken in pod "
                        f"{entry.pod} (a {taken.kind or 'netdev'}; the pod's CNI interface is "
                        "usually eth0); pick another name"
                    )
                try:
                    self.mover.move(
                        None,
                        link.index,
                        ns,
                        entry.pod_name,
                        f"{where}: moving {entry.host_name} into pod {entry.pod} as "
                        f"{entry.pod_name}",
                    )
                except PermanentError:
                    # the kernel moves before it renames: the netdev may be in the pod
                    self._return_quietly(entry)
                    raise
                _crash_point("netdev-after-move-in")
            else:
                there = self.mover.find(ns, [entry.pod_name, entry.host_name], entry.mac)
                if there is None:
                    self.journal.drop(entry.function)
                    raise RetryableError(
                        f"{where}: netdev {entry.host_name} is neither in the host nor in pod "
                        f"{entry.pod}"
                    )
                if there.name != entry.pod_name:  # moved, and the rename did not happen
                    self.mover.rename(ns, there.index, entry.pod_name)
        # no journal write between the move and "in": a restart that finds "moving-in" looks in
        # the host and then in the pod, and configuring again is harmless (each write costs two
        # fsyncs, and all of this runs inside the runtime's 2 s NRI request timeout)
        try:
            info = self.mover.configure(
                ns,
                entry.pod_name,
                mtu=entry.mtu,
                addresses=entry.addresses,
                up=True,
                what=f"{where}: NicConfig interface: {entry.pod_name} in pod {entry.pod}",
            )
        except PermanentError:
            self._return_quietly(entry)
            raise
        if entry.phase != "in":
            _crash_point("netdev-after-configure")
            self.journal.put(entry.model_copy(update={"phase": "in"}))
        return info

    def _return_quietly(self, entry: Move) -> None:
        try:
            self._return(entry)
        except (PermanentError, RetryableError, OSError) as e:
            log.warning(
                "netdev %s (%s, claim %s): returning it to the host failed, retried later: %s",
                entry.pod_name,
                entry.function,
                entry.claim,
                e,
            )

    def _return(self, entry: Move) -> None:
        """Take ``entry`` back to the host, under its host name and settings; drop it."""
        if entry.phase != "moving-out":
            entry = entry.model_copy(update={"phase": "moving-out"})
            self.journal.put(entry)
        ns = self._open(entry)
        if ns is not None:  # still in the pod, unless a kill came after the move out
            with ns:
                link = self.mover.find(ns, [entry.pod_name, entry.host_name], entry.mac)
                if link is not None:
                    self._move_home(ns, link, entry)
                    _crash_point("netdev-after-move-out")
        # in the host: under its host name, or as the kernel brought it back from a dead
        # namespace (its pod name, or dev<ifindex> where the host has that name)
        names = [entry.host_name, entry.pod_name, f"dev{entry.index}"]
        link = self.mover.find(None, names, entry.mac, entry.index)
        if link is None:
            log.warning(
                "netdev %s (%s) is gone: a virtual netdev (veth) dies with the network namespace "
                "of pod %s; nothing to return",
                entry.host_name,
                entry.function,
                entry.pod,
            )
        else:
            if link.name != entry.host_name:
                self.mover.rename(None, link.index, entry.host_name)
            self.mover.configure(
                None,
                entry.host_name,
                mtu=entry.host_mtu,
                addresses=entry.host_addresses,
                up=entry.host_up,
                what=f"restoring {entry.host_name} ({entry.function}) in the host",
            )
            _crash_point("netdev-after-restore")
        self.journal.drop(entry.function)

    def _move_home(self, ns: PodNetns, link: LinkInfo, entry: Move) -> None:
        what = f"moving {link.name} ({entry.function}) back from pod {entry.pod}"
        with HostNetns() as host:
            try:
                self.mover.move(ns, link.index, host, entry.host_name, what)
            except PermanentError as e:  # its host name is taken: come back under the pod name
                log.warning(
                    "%s as %s: %s; moving it back as %s", what, entry.host_name, e, link.name
                )
                self.mover.move(ns, link.index, host, link.name, what)
