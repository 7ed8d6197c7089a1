"""The live-netlink seam: VF settings, MTU and channel counts.

On a node, :class:`Pyroute2Netlink` sends ``RTM_SETLINK`` on the PF with ``IFLA_VFINFO_LIST``
(the same message as ``ip link set <pf> vf <i> mac ... vlan ... spoofchk ... trust ...
max_tx_rate ...``), sets a VF netdev's MTU, and sets its combined channel count through the
ethtool ioctl (``ethtool -L <if> combined N``). On a simulated root the simulator hands the
backend a stand-in (``PluginContext.libraries["pyroute2"]``, from the backend's ``sim``
package through the ``drakit.sim_libraries`` entry point group, as the fake NVML reaches the
NVIDIA backend) that records the same requests as files, so tests read what a node's kernel
would have been told. ``netlink: auto`` takes the stand-in when there is one.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from pydantic import BaseModel, ConfigDict

from drakit.errors import ConfigInvalid, PermanentError, RetryableError

__all__ = [
    "NETLINK_LIBRARY",
    "RESET",
    "Netlink",
    "Pyroute2Netlink",
    "VfSettings",
    "netlink_for",
]

log = logging.getLogger(__name__)

_BUSY = frozenset({errno.EBUSY, errno.EAGAIN})
"""What ionic answers while its firmware resets or another operation is pending: try again."""

NETLINK_LIBRARY = "pyroute2"
"""The key of a simulated root's netlink stand-in in ``PluginContext.libraries``."""


class VfSettings(BaseModel):
    """What is set on a VF through its PF (``None``: leave as it is)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mac: str | None = None
    vlan: int | None = None
    trust: bool | None = None
    spoofchk: bool | None = None
    max_tx_rate_mbps: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The set fields (all plain values, so no serializer: it runs on every shared prepare)."""
        return {k: v for k, v in self.__dict__.items() if v is not None}


RESET = VfSettings(mac="00:00:00:00:00:00", vlan=0, trust=False, spoofchk=True, max_tx_rate_mbps=0)
"""What a VF goes back to when its claim is unprepared."""


class Netlink(Protocol):
    """The operations the AINIC backend needs from netlink."""

    def set_vf(self, pf_ifname: str, pf_bdf: str, vf: int, settings: VfSettings) -> None:
        """Apply ``settings`` to VF ``vf`` of the PF."""

    def set_mtu(self, ifname: str, netdev_dir: Path, mtu: int) -> None:
        """Set a netdev's MTU."""

    def set_channels(self, ifname: str, netdev_dir: Path, count: int) -> None:
        """Set a netdev's combined channel (queue pair) count."""


class Pyroute2Netlink:
    """Netlink on a node through pyroute2 (needs CAP_NET_ADMIN).

    One rtnetlink socket and one ethtool handle, opened on first use and kept: a fresh
    ``IPRoute`` costs about 0.6 ms per call before it sends anything, a shared prepare makes
    two or three calls, and unprepare as many. Devices are named in the request itself
    (``IFLA_IFNAME``: the kernel looks the name up, no ``RTM_GETLINK`` first). A call that
    fails below netlink (the socket, not the kernel's answer) closes both, so the next call
    opens them again. Thread-safe (one lock: calls are a few hundred microseconds).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ip: Any = None
        self._eth: Any = None

    def close(self) -> None:
        """Close the sockets (the next call opens them again)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        for handle in (self._ip, self._eth):
            if handle is not None:
                try:
                    handle.close()
                except Exception as e:  # noqa: BLE001 - closing a broken socket: nothing to do
                    log.debug("closing a netlink handle: %s", e)
        self._ip = self._eth = None

    def _iproute(self) -> Any:
        if self._ip is None:
            from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

            self._ip = IPRoute()
        return self._ip

    def _ethtool(self) -> Any:
        if self._eth is None:
            from pyroute2.ethtool import Ethtool  # type: ignore[import-untyped]  # noqa: PLC0415

            self._eth = Ethtool()
        return self._eth

    def _setlink(self, ifname: str, what: str, **attrs: Any) -> None:
        from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
            NetlinkError,
        )

        with self._lock:
            try:
                self._iproute().link("set", ifname=ifname, **attrs)
            except NetlinkError as e:
                again = _retryable(ifname, what, e.code, str(e))
                raise again or PermanentError(f"{ifname}: the kernel refused {what}: {e}") from e
            except OSError as e:  # the socket, not the kernel's answer: open a new one
                self._close()
                raise RetryableError(f"{ifname}: netlink failed setting {what}: {e}") from e

    def set_vf(self, pf_ifname: str, pf_bdf: str, vf: int, settings: VfSettings) -> None:
        """``ip link set <pf> vf <vf> ...`` as one RTM_SETLINK."""
        spec: dict[str, Any] = {"vf": vf}
        if settings.mac is not None:
            spec["mac"] = settings.mac
        if settings.vlan is not None:
            spec["vlan"] = settings.vlan
        if settings.trust is not None:
            spec["trust"] = int(settings.trust)
        if settings.spoofchk is not None:
            spec["spoofchk"] = int(settings.spoofchk)
        if settings.max_tx_rate_mbps is not None:
            spec["rate"] = {"min_tx_rate": 0, "max_tx_rate": settings.max_tx_rate_mbps}
        self._setlink(pf_ifname, f"vf {vf} {spec}", vf=spec)

    def set_mtu(self, ifname: str, netdev_dir: Path, mtu: int) -> None:
        """``ip link set <if> mtu <mtu>``."""
        self._setlink(ifname, f"MTU {mtu}", mtu=mtu)

    def set_channels(self, ifname: str, netdev_dir: Path, count: int) -> None:
        """``ethtool -L <if> combined <count>``.

        ``rx <count> tx <count>`` where the driver counts its channels apart (no combined ones).
        """
        from pyroute2.ethtool.ioctl import (  # type: ignore[import-untyped]  # noqa: PLC0415
            NoSuchDevice,
            NotSupportedError,
        )

        with self._lock:
            try:
                eth = self._ethtool()
                current = eth.get_channels(ifname)
                if current.max_combined > 0:
                    change = {"combined_count": count}
                else:
                    change = {"rx_count": count, "tx_count": count}
                eth.set_channels(ifname, change)
            except NoSuchDevice as e:
                raise _missing(ifname) from e
            except NotSupportedError as e:
                raise PermanentError(
                    f"{ifname}: cannot set {count} channels: its driver does not change "
                    "channel counts (ethtool -L)"
                ) from e
            except OSError as e:  # the kernel's answer to the ioctl, or a broken socket
                if e.errno == errno.EBADF:
                    self._close()
                why = e.strerror or str(e)
                again = _retryable(ifname, f"{count} channels", e.errno, why)
                raise again or PermanentError(
                    f"{ifname}: cannot set {count} channels: {why}"
                ) from e


def _missing(ifname: str) -> RetryableError:
    return RetryableError(f"netdev {ifname} is not in this network namespace")


def _retryable(ifname: str, what: str, code: int | None, why: str) -> RetryableError | None:
    """The error when the kernel's ``code`` for setting ``what`` is worth a retry, else None.

    A netdev not (yet) there and a busy NIC are; the callers word every other refusal.
    """
    if code == errno.ENODEV:
        return _missing(ifname)
    if code in _BUSY:
        return RetryableError(f"{ifname}: busy, {what} not set yet ({why}); the claim is retried")
    return None


def netlink_for(choice: str, libraries: Mapping[str, object]) -> Netlink:
    """The seam implementation ``plugins.amd_ainic.netlink`` names.

    ``auto`` and ``tree`` take the simulated root's stand-in (``libraries["pyroute2"]``) when
    there is one; ``auto`` without one and ``pyroute2`` talk to the kernel.

    Raises:
        ConfigInvalid: ``tree`` on a root the simulator did not build (no stand-in).
    """
    stand_in = libraries.get(NETLINK_LIBRARY)
    if choice != "pyroute2" and stand_in is not None:
        return cast(Netlink, stand_in)
    if choice == "tree":
        raise ConfigInvalid(
            [
                (
                    "plugins.amd_ainic.netlink",
                    "'tree' records into a simulated tree, and this root is not one; use 'auto' "
                    "or 'pyroute2'",
                )
            ]
        )
    return Pyroute2Netlink()
