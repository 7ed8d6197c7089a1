"""The VF ledger: which claim holds which VF, and which VFs were created on demand.

The checkpoint records what a prepare *returned*; a kill between the backend's side effects
and that record would lose them. So the backend writes its intent here first and repairs from
it: a VF whose claim the checkpoint no longer holds is reset, and on-demand VFs of an idle PF are
removed. The file is a :class:`drakit.statefiles.StateFile` in the backend's own directory under
the node's ``--state-dir`` (``PluginContext.state``): written atomically and checksummed, never
read through a link or blocked on, and moved aside under a timestamped name when damaged
(:attr:`Ledger.damage` says what was wrong and where the copy is). A lost or damaged ledger is
rebuilt from the checkpoint (:mod:`drakit_amd_ainic.prepare`, ``reconcile``).

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

import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.statefiles import Damage, StateDir, StateFile, quarantine

__all__ = ["Assignment", "Ledger", "LedgerData"]

log = logging.getLogger(__name__)

FILE = "vf-ledger.json"
KIND = "AinicVfLedger"


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
    """Load and save :class:`LedgerData` in ``state`` (callers serialise access).

    ``boot_id`` is the kernel's boot ID now (empty when unknown: then every file is taken as
    written in this boot).
    """

    def __init__(self, state: StateDir, boot_id: str = "") -> None:
        self.state = state
        self._file: StateFile | None = None
        self.boot_id = boot_id
        self._data: LedgerData | None = None
        self.damage: Damage | None = None
        """The damage found the last time the file was read (``None``: it was sound)."""

    @property
    def file(self) -> StateFile:
        """The state file (resolved on first use: a context built without a node has none).

        Raises:
            PermanentError: the plugin's context has no state directory.
        """
        if self._file is None:
            self._file = self.state.file(FILE, kind=KIND)
        return self._file

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self.file.path

    @property
    def dir(self) -> Path:
        """The backend's state directory."""
        return self.file.path.parent

    def load(self) -> LedgerData:
        """The ledger: the copy in memory, else the file (empty if there is none yet).

        Raises:
            RetryableError: the file system refused.
        """
        if self._data is None:
            self._data = self._read()
        return self._data

    def forget(self) -> None:
        """Drop the copy in memory; the next :meth:`load` reads the file."""
        self._data = None

    def _read(self) -> LedgerData:
        raw = self.file.read()
        self.damage = self.file.damage
        if raw is None:
            return LedgerData(boot_id=self.boot_id)
        try:
            data = LedgerData.model_validate(raw)
        except ValidationError as e:
            first = str(e).splitlines()[1:2] or ["invalid"]
            self.damage = Damage(self.path, f"not a VF ledger: {first[0]}", quarantine(self.path))
            log.error("%s", self.damage)
            return LedgerData(boot_id=self.boot_id)
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
        """Replace the file atomically (callers hold the backend's lock).

        Raises:
            RetryableError: the file system refused; the copy in memory is dropped.
        """
        if self.boot_id:
            data.boot_id = self.boot_id
        try:
            self.file.write(data.model_dump(mode="json"))
        except BaseException:
            self._data = None
            raise
        self._data = data
