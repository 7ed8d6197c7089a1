"""The crash-safe checkpoint of prepared claims.

One JSON file per driver, versioned (``apiVersion``/``kind``), checksummed (SHA-256 over the
canonical JSON of the claims) and written atomically (temp file in the same directory, fsync,
rename, fsync of the directory). Each claim moves through::

    [PrepareStarted ->] PrepareCompleted -> (removed)

``PrepareStarted`` reaches the file only for a composite whose members are recorded one by one;
otherwise a prepare writes once, ``PrepareCompleted``, and an unprepare of a claim the file does
not know reaches every backend of the driver. ``UnprepareStarted`` is no longer written (the
prepare pipeline removes a claim's CDI spec before undoing it, and a completed record without a
spec is prepared afresh), but records in it, from older versions, are finished by the next
call. A crash at any point leaves a state the next kubelet call completes or rolls
back.
The node's boot ID is recorded: after a reboot the CDI specs (on tmpfs) are gone, so every
completed claim is demoted to ``PrepareStarted`` and re-prepared on the next call.

The store keeps the checkpoint it last read or wrote in memory and reads the file again only when
the file on disk is no longer the one it wrote (another instance wrote it during a rolling update,
or someone replaced it); it re-serialises only the records that changed (records are immutable, so
an unchanged record is the same object and its canonical JSON is reused).

A checkpoint that cannot be read (bad JSON, JSON nested too deeply, bad checksum, unknown version,
or not a regular file at all: a directory, a FIFO, a device, a link; it is opened without blocking
and without following links) is moved aside to a unique ``<name>.corrupt-<time>-<pid>-<random>``
(every copy is kept), reported through ``on_repair`` (a metric, a Kubernetes Event and a log line
in the node), and replaced by what the other evidence on the node says is still held: ``recover``
(the prepare pipeline rebuilds records from the CDI specs it wrote). The driver keeps serving,
never crash-loops, and never hands out a device a running claim may hold.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import DrakitError
from drakit.models import PreparedDevice, PreparedDeviceRef
from drakit.statefiles import NotRegular, fs_error, quarantine, read_regular, write_atomic

__all__ = [
    "CHECKPOINT_API_VERSION",
    "Checkpoint",
    "CheckpointStore",
    "ClaimPhase",
    "ClaimRecord",
    "read_boot_id",
]

CHECKPOINT_API_VERSION: Final = "checkpoint.drakit.io/v1"

log = logging.getLogger(__name__)


class ClaimPhase(StrEnum):
    """Where a claim is in its two-phase life."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"


MAX_CHECKPOINT_BYTES: Final = 256 * 1024 * 1024
"""A checkpoint file larger than this is treated as damage (a claim record is ~1 KiB)."""


class ClaimRecord(BaseModel):
    """What the driver remembers about one claim (immutable: a change is a new record)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    name: str
    uid: str
    phase: ClaimPhase
    prepared: dict[str, list[PreparedDevice]] = Field(
        default_factory=dict, description="Per owning plugin: what its prepare hook returned"
    )
    results: list[PreparedDeviceRef] = Field(
        default_factory=list, description="What was returned to the kubelet"
    )
    cdi_spec: str | None = Field(default=None, description="CDI spec file name, if written")
    recovered: bool = Field(
        default=False,
        description=(
            "Rebuilt from the claim's CDI spec after the checkpoint was lost: ``results`` name "
            "the devices the spec gives the claim (empty: the spec could not be attributed), "
            "``prepared`` is empty (the plugins' state for it is unknown)"
        ),
    )
    admin_requests: list[str] = Field(
        default_factory=list,
        description=(
            "The requests (as in ``results``) allocated with ``adminAccess``: their devices are "
            "not held (another claim may hold them, and they hold nothing for other claims)"
        ),
    )
    reserved_for: list[str] = Field(
        default_factory=list,
        description=(
            "The UIDs of the pods in the claim's status.reservedFor at its prepare calls (the "
            "NRI plugin's pod -> claims map)"
        ),
    )


def _canonical(rec: ClaimRecord) -> str:
    """The canonical JSON of one record (``recovered``, ``admin_requests`` only when set).

    Older files lack those two fields, so leaving them out when unset keeps their checksums.

    Sorted keys, no spaces, ASCII only, written by orjson (about ten times faster than the
    standard encoder); a record with non-ASCII text or an integer beyond 64 bits is written by
    ``json.dumps(sort_keys=True, separators=(",", ":"))``. Older versions wrote every record
    that way, which spells a few things differently (a float's exponent, ``1e-07`` against
    ``1e-7``; DEL as ``\u007f``), so :meth:`CheckpointStore.load` accepts that spelling too.
    """
    body = _record_body(rec)
    try:
        fast = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits
        return _canonical_std(body)
    return fast.decode() if fast.isascii() else _canonical_std(body)


def _record_body(rec: ClaimRecord) -> dict[str, Any]:
    body = rec.model_dump(mode="json")
    if not rec.recovered:
        del body["recovered"]
    if not rec.admin_requests:  # older files lack it: their checksums stay valid
        del body["admin_requests"]
    if not rec.reserved_for:  # likewise
        del body["reserved_for"]
    return body


def _canonical_std(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def _canonical_legacy(rec: ClaimRecord) -> str:
    """:func:`_canonical` as the standard encoder alone writes it (floats spelled by ``repr``)."""
    return _canonical_std(_record_body(rec))


def _entry(uid: str, canonical: str) -> str:
    """One ``"uid":{record}`` member of the claims object, as checksummed and as written."""
    return f"{json.dumps(uid)}:{canonical}"


def _body(driver: str, boot_id: str, claims: Mapping[str, str]) -> str:
    """Canonical JSON of driver, boot ID and (already canonical) claims: what is checksummed."""
    return _body_of(driver, boot_id, [_entry(uid, claims[uid]) for uid in sorted(claims)])


def _body_of(driver: str, boot_id: str, entries: list[str]) -> str:
    """:func:`_body` from the claims' entries, in UID order."""
    items = ",".join(entries)
    return f'{{"bootID":{_quoted(boot_id)},"claims":{{{items}}},"driver":{_quoted(driver)}}}'


@functools.lru_cache(maxsize=64)
def _quoted(text: str) -> str:
    """``text`` as a JSON string; the header's few values, encoded once instead of per save."""
    return json.dumps(text)


class Checkpoint(BaseModel):
    """The whole checkpoint file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["checkpoint.drakit.io/v1"] = Field(
        default=CHECKPOINT_API_VERSION, alias="apiVersion"
    )
    kind: Literal["DriverCheckpoint"] = "DriverCheckpoint"
    driver: str
    boot_id: str = Field(default="", alias="bootID")
    checksum: str = ""
    claims: dict[str, ClaimRecord] = Field(default_factory=dict)

    def compute_checksum(self) -> str:
        """SHA-256 over the canonical JSON of the driver, boot ID and claims."""
        canon = {uid: _canonical(rec) for uid, rec in self.claims.items()}
        return hashlib.sha256(_body(self.driver, self.boot_id, canon).encode()).hexdigest()


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    """The kernel's boot ID (changes on every reboot); empty if unreadable."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return ""


Recover = Callable[[Checkpoint], dict[str, ClaimRecord]]
"""Given the checkpoint as read (possibly empty), records for claims the node still holds but the
checkpoint does not know (the prepare pipeline reads them from its CDI specs)."""


class CheckpointStore:
    """Reads and writes one driver's checkpoint file.

    Not thread-safe by itself: the prepare pipeline holds its lock around read-modify-write.

    Args:
        path: the checkpoint file.
        driver: the driver it belongs to (a mismatch is treated as corruption).
        boot_id: the current boot ID.
        on_repair: called as ``on_repair(reason, message, count)`` when the store repaired
            something: ``"corrupt"`` (a damaged file moved aside; count 1), ``"reboot"``
            (``count`` completed claims demoted for re-preparation) or ``"recovered"``
            (``count`` records rebuilt by ``recover``).
        recover: rebuilds records the file lacks from other evidence; called whenever the file
            is read from disk (start-up, a file changed by someone else, a damaged file).
    """

    def __init__(
        self,
        path: Path,
        driver: str,
        boot_id: str,
        on_repair: Callable[[str, str, int], None] | None = None,
        recover: Recover | None = None,
    ) -> None:
        self.path = path
        self._file = os.fspath(path)  # str paths: pathlib's conversions cost on every write
        self.driver = driver
        self.boot_id = boot_id
        self.on_repair = on_repair
        self.recover = recover
        self._cp: Checkpoint | None = None
        self._ident: tuple[int, int, int, int] | None = None
        self._canon: dict[str, tuple[ClaimRecord, str]] = {}
        self._dfd: int | None = None
        self.reads = 0
        """How many times the file was read (start-up, outside changes, repairs)."""
        self.writes = 0
        """How many times the file was written."""

    def _on_disk(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.lstat(self._file)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise fs_error("inspect the checkpoint", self.path, e) from e
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def invalidate(self) -> None:
        """Forget what is in memory: the next :meth:`load` reads the file."""
        self._cp = None
        self._ident = None

    def load(self) -> Checkpoint:
        """The current checkpoint; empty if missing; repaired if damaged or from another boot.

        The object is the store's own: change its ``claims`` and :meth:`save` it.

        Raises:
            RetryableError: the file cannot be read for a file-system reason (permission, I/O).
        """
        if self._cp is not None and self._ident is not None and self._on_disk() == self._ident:
            return self._cp
        self.invalidate()
        cp = self._read()
        self._cp = cp
        return cp

    def _read(self) -> Checkpoint:
        self.reads += 1
        try:
            raw = read_regular(self.path, MAX_CHECKPOINT_BYTES)
        except NotRegular as e:
            return self._move_aside(f"it is {e}")
        if raw is None:
            return self._recovered(Checkpoint(driver=self.driver, boot_id=self.boot_id), "")
        try:
            data: Any = json.loads(raw)
            cp = Checkpoint.model_validate(data)
            if cp.driver != self.driver:
                raise ValueError(f"checkpoint is for driver {cp.driver!r}, not {self.driver!r}")
            canon = {uid: _canonical(rec) for uid, rec in cp.claims.items()}
            digest = hashlib.sha256(_body(cp.driver, cp.boot_id, canon).encode()).hexdigest()
            if cp.checksum != digest:  # floats written by the standard encoder alone?
                legacy = {uid: _canonical_legacy(rec) for uid, rec in cp.claims.items()}
                body = _body(cp.driver, cp.boot_id, legacy)
                if cp.checksum != hashlib.sha256(body.encode()).hexdigest():
                    raise ValueError("checksum mismatch")
                # the cache keeps :func:`_canonical`'s spelling, so the next save writes one
                # spelling for every record
        except RecursionError:
            return self._move_aside("its JSON is nested too deeply")
        except (ValueError, ValidationError) as e:
            return self._move_aside(str(e).splitlines()[0])
        self._canon = {uid: (rec, _entry(uid, canon[uid])) for uid, rec in cp.claims.items()}
        if cp.boot_id == self.boot_id:
            self._ident = self._on_disk()
            return self._recovered(cp, "", save=False)
        demoted = 0
        for uid, rec in list(cp.claims.items()):
            if rec.phase == ClaimPhase.PREPARE_COMPLETED:
                cp.claims[uid] = rec.model_copy(update={"phase": ClaimPhase.PREPARE_STARTED})
                demoted += 1
        msg = (
            f"node rebooted since the checkpoint was written (boot {cp.boot_id or '?'} -> "
            f"{self.boot_id or '?'}): {demoted} prepared claims will be re-prepared on "
            "their next call"
        )
        self._report(logging.INFO, "reboot", msg, demoted)
        cp.boot_id = self.boot_id
        return self._recovered(cp, "")

    def _recovered(self, cp: Checkpoint, why: str, *, save: bool = True) -> Checkpoint:
        """Add what ``recover`` finds; save if anything changed (or ``save``)."""
        found = self.recover(cp) if self.recover is not None else {}
        for uid, rec in found.items():
            cp.claims.setdefault(uid, rec)
        if found:
            msg = (
                f"checkpoint {self.path} of driver {self.driver} did not know {len(found)} "
                f"claims that still have CDI specs{why}: {', '.join(sorted(found)[:10])}; "
                "their devices are treated as held until the kubelet unprepares them"
            )
            self._report(logging.WARNING, "recovered", msg, len(found))
        if found or (save and (cp.claims or self.path.exists() or why)):
            self.save(cp)
        return cp

    def _report(self, level: int, reason: str, msg: str, count: int) -> None:
        """Log a repair and tell ``on_repair`` about it (when it repaired anything)."""
        log.log(level, "%s", msg, stacklevel=2)
        if self.on_repair is not None and count:
            self.on_repair(reason, msg, count)

    def _move_aside(self, reason: str) -> Checkpoint:
        try:
            aside = quarantine(self.path)
        except DrakitError:
            log.exception("could not move the damaged checkpoint %s aside", self.path)
            raise
        msg = (
            f"checkpoint {self.path} of driver {self.driver} was unreadable ({reason}); moved to "
            f"{aside.name}. Claims that still have CDI specs are rebuilt from them and their "
            "devices stay held until unprepared"
        )
        self._report(logging.ERROR, "corrupt", msg, 1)
        empty = Checkpoint(driver=self.driver, boot_id=self.boot_id)
        self._canon = {}
        return self._recovered(empty, " (the checkpoint was damaged)")

    def save(self, cp: Checkpoint) -> None:
        """Write ``cp`` atomically: temp file, fsync, rename, fsync of the directory.

        Only records that changed since the last save or load are serialised again.

        Raises:
            RetryableError: the file system refused (read-only, no space); what is in memory
                is forgotten, so the next call reads the file again.
        """
        cp.boot_id = self.boot_id
        cache = self._canon
        fresh: dict[str, tuple[ClaimRecord, str]] = {}
        for uid, rec in cp.claims.items():
            hit = cache.get(uid)
            if hit is None or hit[0] is not rec:
                hit = (rec, _entry(uid, _canonical(rec)))
            fresh[uid] = hit
        entries = [fresh[uid][1] for uid in sorted(fresh)]
        cp.checksum = hashlib.sha256(_body_of(cp.driver, cp.boot_id, entries).encode()).hexdigest()
        items = ",\n".join([" " + e for e in entries])
        text = (
            f'{{"apiVersion":{_quoted(cp.api_version)},"kind":{_quoted(cp.kind)},'
            f'"driver":{_quoted(cp.driver)},"bootID":{_quoted(cp.boot_id)},'
            f'"checksum":"{cp.checksum}","claims":{{\n{items}\n}}}}\n'
        )
        try:
            ident = self._write(text.encode())
        except OSError as e:
            self.invalidate()
            raise fs_error("write the checkpoint", self.path, e) from e
        self.writes += 1
        self._canon = fresh
        self._cp = cp
        self._ident = ident

    def _write(self, data: bytes) -> tuple[int, int, int, int]:
        # A fixed temp name: every writer of this file holds the driver's lock (the flock
        # serialises the two instances of a rolling update too); whatever is planted there (a
        # stale temp file, a link, a FIFO) is replaced, never followed or blocked on.
        if self._dfd is None:
            self._dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = write_atomic(self.path, data, dir_fd=self._dfd)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def close(self) -> None:
        """Release the directory handle kept for fsync."""
        if self._dfd is not None:
            os.close(self._dfd)
            self._dfd = None
