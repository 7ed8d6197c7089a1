"""The VF ledger: which claim holds which VF, and which VFs were created on demand.

The checkpoint records what a prepare *returned*; a kill between the backend's side effects
and that record would lose them. So the backend writes its intent here first (atomically:
temp file, fsync, rename; mode 0600 in a 0700 directory) and repairs from it: a VF whose claim
the checkpoint no longer holds is reset, and on-demand VFs of an idle PF are removed.

The file is read once, on first use, and kept in memory after: the node process is its only
writer, so the copy in memory is what the file holds. A failed write, or a prepare that fails
part-way (its changes in memory not yet written), drops the copy (:meth:`Ledger.forget`) so the
next use reads the file again: the file, never an unsaved change, is the truth.

What the ledger records lasts one boot: a reboot takes every VF with its settings, so the VFs
that exist after it were made by whoever creates them at boot, not on demand by this backend,
and no claim holds one yet (the kubelet prepares every claim again). The file records the
kernel's boot ID; a ledger written in another boot is read as empty.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import RetryableError

__all__ = ["Assignment", "Ledger", "LedgerData"]

log = logging.getLogger(__name__)

FILE = "vf-ledger.json"


class Assignment(BaseModel):
    """One VF held by one share (or device) of a claim."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    claim: str
    request: str
    device: str
    share: str | None = None
    pf: str
    vf: int

    def key(self) -> tuple[str, str, str, str | None]:
        """Identifies the allocation this VF serves."""
        return (self.claim, self.request, self.device, self.share)


class LedgerData(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    assignments: list[Assignment] = Field(default_factory=list)
    on_demand: dict[str, int] = Field(
        default_factory=dict, description="PF BDF -> sriov_numvfs to restore when idle"
    )
    boot_id: str = Field(
        default="", description="The kernel's boot ID when written (empty: not known)"
    )


class Ledger:
    """Load and save :class:`LedgerData` under ``directory`` (callers serialise access).

    ``boot_id`` is the kernel's boot ID now (empty when unknown: then every file is taken as
    written in this boot).
    """

    def __init__(self, directory: Path, boot_id: str = "") -> None:
        self.dir = directory
        self.boot_id = boot_id
        self.path = directory / FILE
        self._tmp = directory / f".{FILE}.tmp"
        self._data: LedgerData | None = None
        self._dir_ready = False

    def load(self) -> LedgerData:
        """The ledger: the copy in memory, else the file (empty if there is none yet)."""
        if self._data is None:
            self._data = self._read()
        return self._data

    def forget(self) -> None:
        """Drop the copy in memory; the next :meth:`load` reads the file."""
        self._data = None

    def _read(self) -> LedgerData:
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return LedgerData()
        except OSError as e:
            raise RetryableError(f"cannot read the VF ledger {self.path}: {e.strerror}") from e
        try:
            data = LedgerData.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as e:
            raise RetryableError(
                f"the VF ledger {self.path} is corrupt ({e}); stop the node process and move "
                "it away to start afresh (VFs it recorded keep their settings until their "
                "claims are unprepared)"
            ) from e
        if data.boot_id and self.boot_id and data.boot_id != self.boot_id:
            log.warning(
                "the node rebooted since the VF ledger was written (boot %s -> %s): its %d VF "
                "assignment(s) and the on-demand pools of %s went with the VFs; starting afresh",
                data.boot_id,
                self.boot_id,
                len(data.assignments),
                ", ".join(sorted(data.on_demand)) or "no PF",
            )
            return LedgerData(boot_id=self.boot_id)
        return data

    def save(self, data: LedgerData) -> None:
        """Replace the file atomically (fixed temp name: callers hold the backend's lock)."""
        if self.boot_id:
            data.boot_id = self.boot_id
        try:
            self._write(data.model_dump_json().encode())
        except OSError as e:
            self._data = None
            raise RetryableError(f"cannot write the VF ledger {self.path}: {e.strerror}") from e
        except BaseException:
            self._data = None
            raise
        self._data = data

    def _write(self, raw: bytes) -> None:
        if not self._dir_ready:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dir_ready = True
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self._tmp, flags, 0o600)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            self._tmp.unlink()  # a link planted at the temp name is never followed
            fd = os.open(self._tmp, flags | os.O_EXCL, 0o600)
        try:
            try:
                view = memoryview(raw)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._tmp, self.path)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise
