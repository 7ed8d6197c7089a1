"""The VF ledger: which claim holds which VF, and which VFs were created on demand.

The checkpoint records what a prepare *returned*; a kill between the backend's side effects
and that record would lose them. So the backend writes its intent here first (atomically:
temp file, fsync, rename; mode 0600 in a 0700 directory) and repairs from it: a VF whose claim
the checkpoint no longer holds is reset, and on-demand VFs of an idle PF are removed.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import RetryableError

__all__ = ["Assignment", "Ledger", "LedgerData"]

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


class Ledger:
    """Load and save :class:`LedgerData` under ``directory`` (callers serialise access)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.path = directory / FILE

    def load(self) -> LedgerData:
        """The ledger (empty if there is none yet)."""
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return LedgerData()
        except OSError as e:
            raise RetryableError(f"cannot read the VF ledger {self.path}: {e.strerror}") from e
        try:
            return LedgerData.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as e:
            raise RetryableError(
                f"the VF ledger {self.path} is corrupt ({e}); move it away to start afresh "
                "(VFs it recorded keep their settings until their claims are unprepared)"
            ) from e

    def save(self, data: LedgerData) -> None:
        """Replace the file atomically."""
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".ledger-")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(data.model_dump_json(indent=1))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as e:
            raise RetryableError(f"cannot write the VF ledger {self.path}: {e.strerror}") from e
