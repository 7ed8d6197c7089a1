"""The crash-safe checkpoint of prepared claims.

One JSON file per driver, versioned (``apiVersion``/``kind``), checksummed (SHA-256 over the
canonical JSON of the claims) and written atomically (temp file in the same directory, fsync,
rename, fsync of the directory). Each claim moves through two phases::

    PrepareStarted -> PrepareCompleted -> UnprepareStarted -> (removed)

so a crash at any point leaves a record that the next kubelet call completes or rolls back.
The node's boot ID is recorded: after a reboot the CDI specs (on tmpfs) are gone, so every
completed claim is demoted to ``PrepareStarted`` and re-prepared on the next call.

A checkpoint that cannot be read (bad JSON, bad checksum, unknown version) is moved aside to
``<name>.corrupt-<timestamp>``, reported through ``on_repair`` (a Kubernetes Event and a log
line in the node), and replaced by an empty one: the driver keeps serving, never crash-loops.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.models import PreparedDevice, PreparedDeviceRef

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


class ClaimRecord(BaseModel):
    """What the driver remembers about one claim."""

    model_config = ConfigDict(extra="forbid")

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
        body = {
            "driver": self.driver,
            "bootID": self.boot_id,
            "claims": {k: v.model_dump(mode="json") for k, v in sorted(self.claims.items())},
        }
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    """The kernel's boot ID (changes on every reboot); empty if unreadable."""
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError:
        return ""


class CheckpointStore:
    """Reads and writes one driver's checkpoint file.

    Not thread-safe by itself: the prepare pipeline holds its lock around read-modify-write.

    Args:
        path: the checkpoint file.
        driver: the driver it belongs to (a mismatch is treated as corruption).
        boot_id: the current boot ID.
        on_repair: called as ``on_repair(reason, message, count)`` when the store repaired
            something: ``"corrupt"`` (a file moved aside; count 1) or ``"reboot"`` (``count``
            completed claims demoted for re-preparation).
    """

    def __init__(
        self,
        path: Path,
        driver: str,
        boot_id: str,
        on_repair: Callable[[str, str, int], None] | None = None,
    ) -> None:
        self.path = path
        self.driver = driver
        self.boot_id = boot_id
        self.on_repair = on_repair

    def load(self) -> Checkpoint:
        """The current checkpoint; empty if missing; repaired if corrupt or from another boot."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Checkpoint(driver=self.driver, boot_id=self.boot_id)
        try:
            data: Any = json.loads(raw)
            cp = Checkpoint.model_validate(data)
            if cp.driver != self.driver:
                raise ValueError(f"checkpoint is for driver {cp.driver!r}, not {self.driver!r}")
            if cp.checksum != cp.compute_checksum():
                raise ValueError("checksum mismatch")
        except (ValueError, ValidationError) as e:
            return self._move_aside(str(e).splitlines()[0])
        if cp.boot_id != self.boot_id:
            demoted = 0
            for rec in cp.claims.values():
                if rec.phase == ClaimPhase.PREPARE_COMPLETED:
                    rec.phase = ClaimPhase.PREPARE_STARTED
                    demoted += 1
            msg = (
                f"node rebooted since the checkpoint was written (boot {cp.boot_id or '?'} -> "
                f"{self.boot_id or '?'}): {demoted} prepared claims will be re-prepared on "
                "their next call"
            )
            log.info("%s", msg)
            if self.on_repair is not None and demoted:
                self.on_repair("reboot", msg, demoted)
            cp.boot_id = self.boot_id
            self.save(cp)
        return cp

    def _move_aside(self, reason: str) -> Checkpoint:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except OSError:
            log.exception("could not move the corrupt checkpoint %s aside", self.path)
        msg = (
            f"checkpoint {self.path} of driver {self.driver} was unreadable ({reason}); moved to "
            f"{aside.name} and started empty. Claims prepared before are unprepared on request; "
            "their CDI specs are removed by name"
        )
        log.error("%s", msg)
        if self.on_repair is not None:
            self.on_repair("corrupt", msg, 1)
        empty = Checkpoint(driver=self.driver, boot_id=self.boot_id)
        self.save(empty)
        return empty

    def save(self, cp: Checkpoint) -> None:
        """Write ``cp`` atomically: temp file, fsync, rename, fsync of the directory."""
        cp.boot_id = self.boot_id
        cp.checksum = cp.compute_checksum()
        text = cp.model_dump_json(by_alias=True, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
