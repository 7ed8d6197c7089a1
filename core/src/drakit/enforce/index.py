"""What every driver has prepared on the node, as the NRI plugin looks it up (no NRI import)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from drakit.models import PreparedDevice

__all__ = ["DeviceIndex", "Holding"]


@dataclass(frozen=True)
class Holding:
    """One prepared device of a claim, as the index knows it."""

    driver: str
    plugin: str
    claim_uid: str
    device: PreparedDevice


@dataclass(frozen=True)
class DeviceIndex:
    """What every driver has prepared on the node, by CDI name and by plugin.

    Args:
        by_cdi: fully qualified CDI device name -> the prepared device it stands for.
        held: ``(driver, plugin)`` -> every device the plugin holds (adminAccess ones left out).
        plugins: driver -> its plugins, in configuration order.
        pods: pod UID -> the ``(driver, claim uid)`` of its claims (``status.reservedFor``).
        claim_devices: ``(driver, claim uid)`` -> plugin -> what it prepared for the claim.
    """

    by_cdi: Mapping[str, Holding] = field(default_factory=dict)
    held: Mapping[tuple[str, str], Sequence[PreparedDevice]] = field(default_factory=dict)
    plugins: Mapping[str, Sequence[str]] = field(default_factory=dict)
    pods: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)
    claim_devices: Mapping[tuple[str, str], Mapping[str, Sequence[PreparedDevice]]] = field(
        default_factory=dict
    )

    def devices(self, driver: str, plugin: str, names: Iterable[str]) -> list[PreparedDevice]:
        """``plugin``'s devices among the CDI ``names`` (one entry per device, in order)."""
        out: list[PreparedDevice] = []
        for name in names:
            h = self.by_cdi.get(name)
            mine = h is not None and (h.driver, h.plugin) == (driver, plugin)
            if mine and h is not None and h.device not in out:
                out.append(h.device)
        return out

    def claims(self, names: Iterable[str]) -> set[str]:
        """The claim UIDs behind the CDI ``names`` (drakit's only)."""
        return {h.claim_uid for n in names if (h := self.by_cdi.get(n)) is not None}
