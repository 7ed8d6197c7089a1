"""CDI (Container Device Interface) specs: one transient spec file per prepared claim.

The CDI kind of a driver is ``k8s.<driver>/claim``; each prepared device of a claim becomes a
CDI device named ``<claim uid>-<device>`` (never reused, since runtimes cache specs), in the file
``k8s.<driver>-claim_<claim uid>.json`` in the CDI directory (``/var/run/cdi`` on a node).
Files are written atomically (temp file, fsync, rename), mode 0644 whatever the umask; the claim
UID must be one plain file-name component (so a spec never lands outside the directory), and a
link planted at a spec's name is replaced or removed, never followed. ``cdiVersion`` is the
lowest version the content needs, so older runtimes can read it.

Device nodes: a plugin names each node by its container path (``/dev/nvidia0``); the writer
sets ``hostPath`` to the same path under the node's device root (``device_root``, as NVIDIA's
``devRoot``: ``/run/nvidia/driver`` gives ``/run/nvidia/driver/dev/nvidia0``; left out when the
root is ``/``) and checks, as the container runtime will (``lstat``: a char, block or FIFO node,
no link; a node found good is not read again for :data:`NODE_CHECK_SECONDS`), that the host
node is there, so a claim whose node is missing fails at prepare with
the device and the path instead of at container start. A simulated device root (one the
simulator built) may hold regular files where it could not create char devices (not root).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any, Final

import orjson

from drakit.errors import PermanentError, RetryableError
from drakit.models import CdiEdits, CdiHook, CdiMount
from drakit.prepare.safefs import check_component
from drakit.simseam import is_simulated
from drakit.statefiles import (
    DIR_MODE,
    PUBLIC_FILE_MODE,
    NotRegular,
    ensure_dir,
    fs_error,
    read_regular,
    write_atomic,
)

__all__ = ["CdiWriter", "cdi_kind", "device_root_of", "min_cdi_version"]

_NAME_BAD = re.compile(r"[^A-Za-z0-9_.:-]")
NODE_CHECK_SECONDS: Final = 5.0
"""A host node found good is not read again for this long (an ``lstat`` costs ~5 us; a GPU
claim names four nodes, and the same ones claim after claim)."""
MAX_SPEC_BYTES: Final = 4 * 1024 * 1024
"""A spec larger than this is not one drakit wrote (read back only to rebuild a lost checkpoint)."""


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


def _hoisted(
    devices: list[tuple[str, CdiEdits]],
) -> tuple[tuple[CdiMount, ...], tuple[CdiHook, ...], list[tuple[str, CdiEdits]]]:
    """The mounts and hooks every device carries, and the devices without them.

    Only with two devices or more (one device's edits stay where its plugin put them). Order
    is kept: the shared mounts in the first device's order, each device's own in its order
    (the runtime orders mounts by their container path anyway); hooks, whose order matters,
    only as the prefix every device's hooks start with (the runtime runs the spec's first).
    """
    if len(devices) <= 1:
        return (), (), devices
    first = devices[0][1]
    rest = [e for _, e in devices[1:]]
    mounts = _common(first.mounts, [e.mounts for e in rest])
    hooks = _prefix(first.hooks, [e.hooks for e in rest])
    if not mounts and not hooks:
        return (), (), devices
    out = []
    for name, e in devices:
        update: dict[str, Any] = {}
        if mounts:
            update["mounts"] = tuple(m for m in e.mounts if m not in mounts)
        if hooks:
            update["hooks"] = e.hooks[len(hooks) :]
        out.append((name, e.model_copy(update=update)))
    return tuple(mounts), hooks, out


def _common(
    first: tuple[CdiMount, ...], others: list[tuple[CdiMount, ...]]
) -> dict[CdiMount, None]:
    """The entries of ``first`` that every one of ``others`` has too (an ordered set)."""
    if not first:
        return {}
    common = dict.fromkeys(first)
    for entries in others:
        if entries is first or entries == first:
            continue
        have = set(entries)
        common = {k: None for k in common if k in have}
        if not common:
            break
    return common


def _prefix(first: tuple[CdiHook, ...], others: list[tuple[CdiHook, ...]]) -> tuple[CdiHook, ...]:
    """The longest run of hooks every one of ``others`` starts with, as ``first`` does."""
    n = len(first)
    for entries in others:
        if entries is first or entries == first:
            continue
        n = min(n, len(entries))
        for i in range(n):
            if entries[i] != first[i]:
                n = i
                break
        if not n:
            break
    return first[:n]


def device_root_of(device_root: Path | str | None, sysfs_root: Path | str) -> Path:
    """The device root a node uses: the simulated root, else ``device_root``, else ``/``.

    A simulated root (``--profile``, or a ``--sysfs-root`` the simulator built) holds its
    device nodes in its own ``dev/``, so it is its own device root unless another root than
    ``/`` is configured (the host's ``/dev`` has none of them; the chart passes ``/``).
    """
    configured = Path(device_root) if device_root is not None else Path("/")
    if configured == Path("/") and is_simulated(Path(sysfs_root)):
        return Path(sysfs_root)
    return configured


def _absolute(path: Path | str, setting: str, fix: str) -> str:
    """``path`` normalised, or a :class:`PermanentError` naming ``setting`` and ``fix``."""
    normal = os.path.normpath(str(path))
    if not normal.startswith("/"):
        raise PermanentError(f"{setting} {str(path)!r} is not an absolute path; set it to {fix}")
    return normal


class CdiWriter:
    """Writes and removes one driver's per-claim CDI specs.

    Args:
        cdi_dir: the CDI spec directory the container runtime reads.
        driver: the DRA driver name.
        device_root: where the container paths of device nodes are on the host (``/``: as
            they are; ``/run/nvidia/driver``: ``/dev/nvidia0`` is
            ``/run/nvidia/driver/dev/nvidia0``). The host nodes are checked at this path, so
            drakit must see the host's device root at the same path, or at ``check_root``.
        check_root: where this process sees ``device_root`` (a pod that mounts the host's
            ``<device_root>/dev`` elsewhere); default: ``device_root``.
    """

    def __init__(
        self,
        cdi_dir: Path,
        driver: str,
        *,
        device_root: Path | str = "/",
        check_root: Path | str | None = None,
    ) -> None:
        self.cdi_dir = cdi_dir
        self.driver = driver
        self.kind = cdi_kind(driver)
        self.vendor = self.kind.split("/")[0]
        self._dir = str(cdi_dir)
        root = _absolute(
            device_root,
            "device_root",
            "the host directory the device nodes' /dev is in (/ on most nodes)",
        )
        self.device_root = Path(root)
        self._prefix = "" if root == "/" else root
        seen = (
            root
            if check_root is None
            else _absolute(check_root, "device_root_mount", "where this process sees device_root")
        )
        self.check_root = Path(seen)
        self._seen = "" if seen == "/" else seen
        # regular files stand in for char devices only in a tree the simulator built unprivileged
        self._stand_ins = is_simulated(self.check_root)
        self._checked: dict[str, float] = {}  # host node as seen here -> good until (monotonic)

    def spec_name(self, claim_uid: str) -> str:
        """The file name of a claim's spec.

        Raises:
            PermanentError: the UID cannot be part of a file name (``/``, ``..``, ...).
        """
        check_component(claim_uid, "claim uid", max_bytes=128)
        return f"{self.vendor}-claim_{claim_uid}.json"

    def _path(self, claim_uid: str) -> str:
        """A claim's spec path (a string: no ``Path`` built on every prepare and unprepare)."""
        return f"{self._dir}/{self.spec_name(claim_uid)}"

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
        """The spec for a claim: one CDI device per ``(device name, edits)``.

        Mounts and hooks that every device of the claim carries (a GPU's driver files, the
        metadata file of a request's devices) go once into the spec's own ``containerEdits``,
        which the runtime applies whenever any device of the spec is requested: the same
        container edits, written once instead of once per device.

        Device nodes get their ``hostPath`` under the device root (unless the plugin set one).

        Raises:
            RetryableError: a device node the runtime would read from the host is missing
                there, or is not a device node (the message names the device and both paths).
        """
        checked = self._checked
        now = 0.0
        cdi_devices = []
        shared_mounts, shared_hooks, devices = _hoisted(devices)
        for name, edits in devices:
            cdi = edits.to_cdi()
            nodes = cdi.get("deviceNodes")
            if nodes:
                for node in nodes:
                    path = node["path"]
                    host = node.get("hostPath")
                    if host is None:
                        if self._prefix:
                            host = node["hostPath"] = self._prefix + path
                        seen = self._seen + path  # where this process sees the host's node
                    else:  # the plugin's own: seen where it is
                        seen = host
                    # the runtime reads the host node unless type and major are given (go-cdi)
                    if "type" in node and (node.get("major") or node["type"] == "p"):
                        continue
                    now = now or time.monotonic()
                    if checked.get(seen, 0.0) < now:  # not seen there in the last few seconds
                        self._check_node(name, path, host or path, seen)
                        checked[seen] = now + NODE_CHECK_SECONDS
            cdi_devices.append({"name": self.device_name(claim_uid, name), "containerEdits": cdi})
        spec: dict[str, Any] = {"cdiVersion": "", "kind": self.kind, "devices": cdi_devices}
        shared: dict[str, Any] = {}
        if env:
            shared["env"] = [f"{k}={v}" for k, v in sorted(env.items())]
        if shared_mounts:
            shared["mounts"] = [m.to_cdi() for m in shared_mounts]
        if shared_hooks:
            shared["hooks"] = [h.to_cdi() for h in shared_hooks]
        if shared:
            spec["containerEdits"] = shared
        spec["cdiVersion"] = min_cdi_version(spec)
        return spec

    def _check_node(self, device: str, path: str, host: str, seen: str) -> None:
        """Refuse a host node the container runtime could not use (it ``lstat`` s it)."""
        try:
            mode = os.lstat(seen).st_mode
        except FileNotFoundError:
            problem = "is missing on the host"
        except OSError as e:
            problem = f"cannot be read on the host ({os.strerror(e.errno or 0)})"
        else:
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode):
                return
            if self._stand_ins and stat.S_ISREG(mode):
                return  # a simulated node made without the privilege to create char devices
            kind = (
                "a link"
                if stat.S_ISLNK(mode)
                else "a directory"
                if stat.S_ISDIR(mode)
                else ("a regular file" if stat.S_ISREG(mode) else "not a device node")
            )
            problem = f"is {kind}, not a device node (the container runtime refuses it)"
        where = "" if host == path else f" (host path {host}, under device_root {self.device_root})"
        if seen != host:
            where += f" (seen here at {seen})"
        raise RetryableError(
            f"device {device!r}: device node {path}{where} {problem}; load the driver that "
            "creates it, or set device_root to the host directory whose dev/ holds it; will retry"
        )

    def write(self, claim_uid: str, spec: dict[str, Any]) -> str:
        """Write a claim's spec atomically (mode 0644); returns the file name.

        Raises:
            PermanentError: a bad UID, or a directory where the spec goes.
            RetryableError: the file system refused (read-only, no space), named as such.
        """
        name = self.spec_name(claim_uid)
        ensure_dir(self.cdi_dir, DIR_MODE, private=False, allow_link=True)
        try:
            data = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # what only the standard encoder takes (an integer beyond 64 bits)
            data = json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()
        # Per-claim temp name (runtimes read only *.json): calls for a claim are serialised.
        # No fsync of the directory: a spec lost in a power cut is written again at the next
        # prepare (the checkpoint record is the durable one).
        path = self.cdi_dir / name
        try:
            write_atomic(path, data, mode=PUBLIC_FILE_MODE, sync_dir=False)
        except IsADirectoryError as e:
            raise PermanentError(f"{path} is a directory, not a CDI spec: remove it by hand") from e
        except OSError as e:
            raise fs_error("write the CDI spec", path, e) from e
        return name

    def exists(self, claim_uid: str) -> bool:
        """Whether the claim's spec is on disk as a regular file (a link does not count)."""
        try:
            return stat.S_ISREG(os.lstat(self._path(claim_uid)).st_mode)
        except OSError:
            return False

    def remove(self, claim_uid: str) -> bool:
        """Delete a claim's spec; ``False`` if it was not there (not an error).

        A link at the spec's name is removed itself (its target is left alone).

        Raises:
            PermanentError: a bad UID, or a directory where the spec goes.
            RetryableError: the file system refused (read-only, ...), named as such.
        """
        path = self._path(claim_uid)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except IsADirectoryError as e:
            raise PermanentError(f"{path} is a directory, not a CDI spec: remove it by hand") from e
        except OSError as e:
            raise fs_error("remove the CDI spec", path, e) from e
        return True

    def read_devices(self, claim_uid: str) -> list[str] | None:
        """The CDI device names in a claim's spec; ``None`` if it is missing or unreadable."""
        try:
            raw = read_regular(Path(self._path(claim_uid)), MAX_SPEC_BYTES)
            if raw is None:
                return None
            doc = json.loads(raw)
            names = [str(d["name"]) for d in doc["devices"]]
        except (NotRegular, ValueError, KeyError, TypeError, RecursionError, OSError):
            return None
        except PermanentError:
            return None
        return names

    def claim_uids(self) -> set[str]:
        """UIDs of the claims that have a spec in the directory (to find leaks)."""
        prefix = f"{self.vendor}-claim_"
        try:
            names = os.listdir(self.cdi_dir)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        except OSError as e:
            raise fs_error("list the CDI directory", self.cdi_dir, e) from e
        out = set()
        for n in names:
            if n.startswith(prefix) and n.endswith(".json"):
                uid = n[len(prefix) : -len(".json")]
                try:
                    check_component(uid, "claim uid", max_bytes=128)
                except PermanentError:
                    continue
                out.add(uid)
        return out
