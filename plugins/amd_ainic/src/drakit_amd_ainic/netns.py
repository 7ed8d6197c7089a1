"""Netdevs between the host's network namespace and a pod's, through pyroute2.

Each operation is one or two rtnetlink requests; :mod:`drakit_amd_ainic.podnet` puts them in
order and journals them. A request in a pod's namespace goes through a rtnetlink socket opened
inside it: a short-lived thread enters the namespace (``setns(2)`` changes the calling thread
only), opens the socket, does the work and ends, so no other thread of ``drakit node`` ever runs
in the pod's namespace and nothing forks. A namespace is opened by its path (what the runtime
reports, ``/var/run/netns/cni-...``) once, as a file descriptor, and kept open while it is
worked on, so it cannot go away under a step; the descriptor is checked to be a network
namespace (``nsfs``), so a path the runtime removed, or a plain file where its bind mount was,
is not taken for one.

Moving in is one ``RTM_NEWLINK`` carrying ``IFLA_NET_NS_FD`` and the new ``IFLA_IFNAME``, as
dranet sends it. It is not atomic: the kernel moves the netdev first (under its current name
when that is free in the pod, else under the new one) and renames it afterwards, so a refused
rename leaves it in the pod under its host name. Callers check the pod's namespace for the name
first and, after any refusal, look for the netdev under both names. MTU, addresses and the up
state follow as separate requests inside the pod's namespace, each safe to repeat. The kernel
closes the netdev (down) and drops its addresses when it changes namespace.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from drakit.errors import PermanentError, RetryableError

__all__ = ["HostNetns", "LinkInfo", "Mover", "NetnsGone", "PodNetns"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLONE_NEWNET = 0x40000000
_IFF_UP = 0x1
_SCOPE_UNIVERSE = 0
_BUSY = frozenset({errno.EBUSY, errno.EAGAIN})
_libc: Any = None


def _setns(fd: int) -> None:
    global _libc  # noqa: PLW0603 - loaded once
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class NetnsGone(Exception):
    """The pod's network namespace is not there (any more): its path is gone or not a netns."""


def _nsfs_dev() -> int:
    return os.stat("/proc/self/ns/net").st_dev


class PodNetns:
    """An open network namespace of a pod (a file descriptor; close it, or use ``with``).

    Raises:
        NetnsGone: ``path`` is missing or not a network namespace.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise NetnsGone(f"{path}: {e.strerror}") from e
        st = os.fstat(self.fd)
        if st.st_dev != _nsfs_dev():
            os.close(self.fd)
            raise NetnsGone(f"{path}: not a network namespace (the runtime removed it)")
        self.inode = st.st_ino

    def close(self) -> None:
        """Close the descriptor (the namespace lives on while others hold it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PodNetns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HostNetns(PodNetns):
    """The namespace ``drakit node`` runs in: the host's (the chart runs it with hostNetwork)."""

    def __init__(self) -> None:
        super().__init__("/proc/self/ns/net")


@dataclass(frozen=True)
class LinkInfo:
    """A netdev as rtnetlink reports it."""

    index: int
    name: str
    mac: str | None
    mtu: int | None
    up: bool
    kind: str | None
    addresses: tuple[str, ...] = ()
    """Its global (scope universe) addresses, CIDR."""


def _iproute_class() -> Any:
    from pyroute2 import IPRoute  # type: ignore[import-untyped]  # noqa: PLC0415

    return IPRoute


def _iproute() -> Any:
    return _iproute_class()()


def _netlink_error() -> type[Exception]:
    from pyroute2.netlink.exceptions import (  # type: ignore[import-untyped]  # noqa: PLC0415
        NetlinkError,
    )

    err: type[Exception] = NetlinkError
    return err


def _link_info(ipr: Any, msg: Any, with_addresses: bool) -> LinkInfo:
    index = int(msg["index"])
    kind = None
    info = msg.get("IFLA_LINKINFO")
    if info is not None:
        kind = info.get("IFLA_INFO_KIND")
    addrs: tuple[str, ...] = ()
    if with_addresses:
        addrs = tuple(
            f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}"
            for a in ipr.get_addr(index=index)
            if a["scope"] == _SCOPE_UNIVERSE and a.get("IFA_ADDRESS")
        )
    return LinkInfo(
        index=index,
        name=str(msg.get("IFLA_IFNAME")),
        mac=msg.get("IFLA_ADDRESS"),
        mtu=msg.get("IFLA_MTU"),
        up=bool(msg["flags"] & _IFF_UP),
        kind=kind,
        addresses=addrs,
    )


class Mover:
    """The rtnetlink requests of a netdev move (needs CAP_NET_ADMIN in both namespaces).

    Stateless: every call opens its socket (moves are rare, at sandbox start and stop; a socket
    costs well under a millisecond) in the namespace it works in. pyroute2 is imported when
    the mover is made, at the backend's start: importing it takes about 0.35 s (several
    seconds on a loaded machine), which must not fall inside the runtime's NRI request
    timeout (2 s on containerd) of the first sandbox.
    """

    def __init__(self) -> None:
        _iproute_class()
        _netlink_error()

    def run_in(self, ns: PodNetns | None, what: str, fn: Callable[[Any], T]) -> T:
        """``fn(ipr)`` with an ``IPRoute`` inside ``ns`` (``None``: this process's namespace).

        Raises:
            PermanentError: the kernel refused (``what`` says what was asked).
            RetryableError: the netdev is busy, or the socket failed.
            NetnsGone: entering ``ns`` failed because it is gone.
        """
        if ns is None:
            return self._call(what, fn)
        out: dict[str, Any] = {}

        def worker() -> None:  # a thread of its own: setns changes this thread only
            try:
                _setns(ns.fd)
            except OSError as e:
                out["error"] = NetnsGone(f"{ns.path}: cannot enter: {e.strerror}")
                return
            try:
                out["value"] = self._call(what, fn)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                out["error"] = e

        t = threading.Thread(target=worker, name="drakit-netns", daemon=True)
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        value: T = out["value"]
        return value

    @staticmethod
    def _call(what: str, fn: Callable[[Any], T]) -> T:
        netlink_error = _netlink_error()
        try:
            with _iproute() as ipr:
                return fn(ipr)
        except netlink_error as e:
            code = getattr(e, "code", None)
            if code in _BUSY:
                raise RetryableError(f"{what}: busy ({e}); retried") from e
            raise PermanentError(f"{what}: the kernel refused: {e}") from e
        except OSError as e:
            raise RetryableError(f"{what}: netlink failed: {e}") from e

    def find(
        self, ns: PodNetns | None, names: Iterable[str], mac: str | None, index: int | None = None
    ) -> LinkInfo | None:
        """The netdev in ``ns`` named one of ``names`` (or with ``index``), whose MAC is ``mac``.

        ``mac`` ``None``: any MAC. The MAC guards against a different netdev under the same name
        (the name of a netdev that left may be taken by another one).
        """
        wanted = [n for n in dict.fromkeys(names) if n]
        netlink_error = _netlink_error()

        def get(ipr: Any, **key: Any) -> Any:
            try:  # one RTM_GETLINK by name or index, not a dump of every link
                (msg,) = ipr.link("get", **key)
            except netlink_error as e:
                if getattr(e, "code", None) == errno.ENODEV:
                    return None
                raise
            return msg

        def look(ipr: Any) -> LinkInfo | None:
            keys: list[dict[str, Any]] = [{"ifname": n} for n in wanted]
            if index is not None:
                keys.append({"index": index})
            for key in keys:
                m = get(ipr, **key)
                if m is None:
                    continue
                if mac is None or str(m.get("IFLA_ADDRESS", "")).lower() == mac.lower():
                    return _link_info(ipr, m, with_addresses=True)
            return None

        return self.run_in(ns, f"looking for netdev {'/'.join(wanted)}", look)

    def move(self, ns: PodNetns | None, index: int, to: PodNetns, name: str, what: str) -> None:
        """Move netdev ``index`` of ``ns`` into ``to``, renamed ``name``: one RTM_NEWLINK."""

        def move(ipr: Any) -> None:
            ipr.link("set", index=index, net_ns_fd=to.fd, ifname=name)

        self.run_in(ns, what, move)

    def rename(self, ns: PodNetns | None, index: int, name: str) -> None:
        """Rename netdev ``index`` of ``ns`` (set down first, as the kernel requires)."""

        def rename(ipr: Any) -> None:
            ipr.link("set", index=index, state="down")
            ipr.link("set", index=index, ifname=name)

        self.run_in(ns, f"renaming netdev {index} to {name}", rename)

    def configure(
        self,
        ns: PodNetns | None,
        name: str,
        *,
        mtu: int | None,
        addresses: Iterable[str],
        up: bool,
        what: str,
    ) -> LinkInfo:
        """Set MTU, add ``addresses`` (kept if there), set up or down; each safe to repeat."""
        addrs = list(addresses)
        netlink_error = _netlink_error()

        def step(label: str, call: Callable[[], object]) -> None:
            try:
                call()
            except netlink_error as e:
                if getattr(e, "code", None) in _BUSY:
                    raise RetryableError(f"{what}: {label}: busy ({e}); retried") from e
                raise PermanentError(f"{what}: {label}: the kernel refused: {e}") from e

        def configure(ipr: Any) -> LinkInfo:
            found = ipr.link_lookup(ifname=name)
            if not found:
                raise RetryableError(f"{what}: netdev {name} is not there")
            index = found[0]
            if mtu is not None:
                step(f"MTU {mtu}", lambda: ipr.link("set", index=index, mtu=mtu))
            for cidr in addrs:
                iface = ipaddress.ip_interface(cidr)
                step(
                    f"address {cidr}",
                    lambda iface=iface: ipr.addr(  # type: ignore[misc]
                        "replace",
                        index=index,
                        address=str(iface.ip),
                        prefixlen=iface.network.prefixlen,
                    ),
                )
            state = "up" if up else "down"
            step(f"link {state}", lambda: ipr.link("set", index=index, state=state))
            (msg,) = ipr.link("get", index=index)
            return _link_info(ipr, msg, with_addresses=True)

        return self.run_in(ns, what, configure)
