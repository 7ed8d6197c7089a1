"""CDI (Container Device Interface) specs: one transient spec file per prepared claim.

The CDI kind of a driver is ``k8s.<driver>/claim``; each prepared device of a claim becomes a
CDI device named ``<claim uid>-<device>`` (never reused, since runtimes cache specs), in the file
``k8s.<driver>-claim_<claim uid>.json`` in the CDI directory (``/var/run/cdi`` on a node).
Files are written atomically (temp file, fsync, rename). ``cdiVersion`` is the lowest version
the content needs, so older runtimes can read it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from drakit.models import CdiEdits

__all__ = ["CdiWriter", "cdi_kind", "min_cdi_version"]

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:-]")


def cdi_kind(driver: str) -> str:
    """``k8s.<driver>/claim``: the CDI kind drakit uses for a driver's claims."""
    return f"k8s.{driver}/claim"


def min_cdi_version(spec: dict[str, Any]) -> str:
    """The lowest CDI spec version that can express ``spec``."""
    version = (0, 3, 0)

    def need(v: tuple[int, int, int]) -> None:
        nonlocal version
        version = max(version, v)

    def edits(e: dict[str, Any]) -> None:
        if e.get("netDevices") or (e.get("intelRdt") or {}).get("schemata"):
            need((1, 1, 0))
        if e.get("intelRdt") or e.get("additionalGids"):
            need((0, 7, 0))
        if any("hostPath" in d for d in e.get("deviceNodes", [])):
            need((0, 5, 0))
        if any("type" in m for m in e.get("mounts", [])):
            need((0, 4, 0))

    if spec.get("annotations"):
        need((0, 6, 0))
    edits(spec.get("containerEdits", {}))
    for dev in spec.get("devices", []):
        if dev["name"][:1].isdigit():
            need((0, 5, 0))
        if dev.get("annotations"):
            need((0, 6, 0))
        edits(dev.get("containerEdits", {}))
    return ".".join(map(str, version))


class CdiWriter:
    """Writes and removes one driver's per-claim CDI specs.

    Args:
        cdi_dir: the CDI spec directory the container runtime reads.
        driver: the DRA driver name.
    """

    def __init__(self, cdi_dir: Path, driver: str) -> None:
        self.cdi_dir = cdi_dir
        self.driver = driver
        self.kind = cdi_kind(driver)
        self.vendor = self.kind.split("/")[0]

    def spec_name(self, claim_uid: str) -> str:
        """The file name of a claim's spec."""
        return f"{self.vendor}-claim_{claim_uid}.json"

    def device_name(self, claim_uid: str, device: str) -> str:
        """The CDI device name of one device of a claim."""
        return _NAME_BAD.sub("_", f"{claim_uid}-{device}")

    def device_id(self, claim_uid: str, device: str) -> str:
        """The fully qualified CDI device ID (``<vendor>/<class>=<name>``)."""
        return f"{self.kind}={self.device_name(claim_uid, device)}"

    def build(
        self,
        claim_uid: str,
        devices: list[tuple[str, CdiEdits]],
        *,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The spec for a claim: one CDI device per ``(device name, edits)``."""
        spec: dict[str, Any] = {
            "cdiVersion": "",
            "kind": self.kind,
            "devices": [
                {"name": self.device_name(claim_uid, name), "containerEdits": edits.to_cdi()}
                for name, edits in devices
            ],
        }
        if env:
            spec["containerEdits"] = {"env": [f"{k}={v}" for k, v in sorted(env.items())]}
        spec["cdiVersion"] = min_cdi_version(spec)
        return spec

    def write(self, claim_uid: str, spec: dict[str, Any]) -> str:
        """Write a claim's spec atomically; returns the file name."""
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        name = self.spec_name(claim_uid)
        fd, tmp = tempfile.mkstemp(prefix=".spec-", suffix=".tmp", dir=self.cdi_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(spec, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.cdi_dir / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return name

    def exists(self, claim_uid: str) -> bool:
        """Whether the claim's spec file is on disk."""
        return (self.cdi_dir / self.spec_name(claim_uid)).exists()

    def remove(self, claim_uid: str) -> bool:
        """Delete a claim's spec; ``False`` if it was not there (not an error)."""
        try:
            (self.cdi_dir / self.spec_name(claim_uid)).unlink()
        except FileNotFoundError:
            return False
        return True

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec in the directory (to find leaks)."""
        prefix = f"{self.vendor}-claim_"
        if not self.cdi_dir.is_dir():
            return set()
        return {
            p.name[len(prefix) : -len(".json")]
            for p in self.cdi_dir.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(".json")
        }
