"""State files of drakit and of its backends: atomic, checksummed, quarantined when damaged.

``drakit node`` runs privileged and keeps what it must remember across a crash in files under
its ``--state-dir``: the checkpoint of every driver (core) and whatever a backend records for
itself (the AMD AINIC backend's VF ledger). Every such file is handled the same way, by this
module:

- **atomic writes**: a temp file in the same directory, fsync, rename over the file, fsync of
  the directory; a kill at any point leaves the old file or the new one, never half of one;
- **a checksum** (SHA-256 over the canonical JSON of the data), so a truncated, edited or
  junked file is recognised as damage, not read as an empty or different state;
- **quarantine**: a damaged file (bad JSON, a wrong checksum, another kind of file, JSON
  nested too deeply, too large, or not a regular file at all: a directory, a FIFO, a socket,
  a device, a symbolic link) is moved aside to ``<name>.corrupt-<UTC time>-<pid>-<random>``
  (every copy is kept for the operator) and the reader is told (:class:`Damage`);
- **no links, no blocking**: files are opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked
  with ``fstat``, so a link planted at a state file's name is never followed and a FIFO or
  device there never blocks the caller (who may hold the driver's lock);
- **explicit modes** whatever the umask: directories 0700, files 0600.

A backend gets its own directory through :attr:`drakit.context.PluginContext.state`, a
:class:`StateDir` at ``<state-dir>/plugin_state/<plugin name>/`` (created on first write), and
keeps its files there with :meth:`StateDir.file` and serialises with :meth:`StateDir.lock`::

    ledger = context.state.file("vf-ledger.json", kind="VfLedger")
    data = ledger.read()               # None: no file yet, or it was damaged (ledger.damage)
    ledger.write({"assignments": []})

The lower-level helpers (:func:`ensure_dir`, :func:`open_private`, :func:`read_regular`,
:func:`write_atomic`, :func:`quarantine`, :func:`fs_error`) are what core's checkpoint and CDI
specs use too. File-system failures are reported as what they are (a read-only file system, no
space left) and are retryable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from drakit.errors import PermanentError, RetryableError

__all__ = [
    "DIR_MODE",
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "PUBLIC_FILE_MODE",
    "STATE_FILE_API_VERSION",
    "Damage",
    "NotRegular",
    "StateDir",
    "StateFile",
    "ensure_dir",
    "fs_error",
    "open_private",
    "quarantine",
    "read_regular",
    "write_atomic",
]

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE: Final = 0o700
"""State and socket directories: only root (the kubelet, the driver) uses them."""
PRIVATE_FILE_MODE: Final = 0o600
"""Checkpoints, lock files and sockets."""
DIR_MODE: Final = 0o755
"""The CDI directory, when drakit creates it: container runtimes read it."""
PUBLIC_FILE_MODE: Final = 0o644
"""CDI specs: read by the container runtime, written only by drakit."""

_REASONS: Final = {
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "I/O error",
    errno.EMFILE: "too many open files",
}


def fs_error(action: str, path: Path | str, exc: OSError) -> RetryableError:
    """A retryable error that says what failed and why, in words (``read-only``, ``no space``)."""
    code = exc.errno or 0
    reason = _REASONS.get(code) or (os.strerror(code) if code else str(exc))
    name = errno.errorcode.get(code, "")
    tag = f" ({name})" if name else ""
    return RetryableError(f"cannot {action} {path}: {reason}{tag}; will retry")


def ensure_dir(
    path: Path, mode: int = PRIVATE_DIR_MODE, *, private: bool = True, allow_link: bool = False
) -> Path:
    """Create ``path`` (and its parents) with ``mode``, whatever the umask; return it.

    An existing ``path`` must be a real directory (not a symbolic link to one): a link planted
    there would move drakit's files elsewhere. With ``private``, an existing directory that
    others can write is tightened to ``mode``. ``allow_link`` accepts a link to a directory
    (for directories the operator configures, like the CDI directory, never for ones named
    after input).

    Raises:
        PermanentError: ``path`` is a link or not a directory.
        RetryableError: the file system refused (read-only, no space, ...).
    """
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise fs_error("inspect the directory", path, e) from e
    if st is None:
        if not path.parent.exists():
            ensure_dir(path.parent, mode, private=False)
        try:
            path.mkdir(mode=mode)
        except FileExistsError:
            pass
        except OSError as e:
            raise fs_error("create the directory", path, e) from e
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) != mode:
            os.chmod(path, mode, follow_symlinks=False)  # mkdir's mode is masked by the umask
            return path
    if stat.S_ISLNK(st.st_mode) and allow_link and path.is_dir():
        return path
    if stat.S_ISLNK(st.st_mode):
        raise PermanentError(
            f"{path} is a symbolic link; drakit does not follow links where it keeps its own "
            "files: replace it by a directory"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise PermanentError(f"{path} is not a directory; remove it or choose another path")
    if private and stat.S_IMODE(st.st_mode) & 0o022:
        try:
            os.chmod(path, mode, follow_symlinks=False)
        except OSError as e:
            raise fs_error("restrict the mode of", path, e) from e
    return path


def open_private(path: Path) -> int:
    """Open (creating it 0600) a file of drakit's own for writing, never through a link.

    A symbolic link or other non-regular file planted at ``path`` is removed and a fresh file is
    created in its place.

    Raises:
        RetryableError: the file system refused.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags, PRIVATE_FILE_MODE)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EWOULDBLOCK):
                _remove_planted(path)
                continue
            raise fs_error("open", path, e) from e
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            _remove_planted(path)
            continue
        if stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        return fd
    raise PermanentError(f"{path} keeps being replaced by something that is not a plain file")


def _remove_planted(path: Path) -> None:
    try:
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode):
            raise PermanentError(f"{path} is a directory, not drakit's file: remove it by hand")
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as e:
        raise fs_error("remove the planted file", path, e) from e


class NotRegular(Exception):
    """The path holds something other than a regular file (its kind is the message)."""


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file, read without blocking and without following a link.

    Returns ``None`` if the file does not exist.

    Raises:
        NotRegular: a link, directory, FIFO, socket or device is there, or the file is over
            ``limit`` bytes (the message says which).
        RetryableError: the file system refused (permission, I/O error).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from e
        if e.errno in (errno.ENXIO, errno.EWOULDBLOCK, errno.ENODEV):
            raise NotRegular("a socket or device") from e
        raise fs_error("read", path, e) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(_kind(st.st_mode))
        if st.st_size > limit:
            raise NotRegular(f"a file of {st.st_size} bytes (at most {limit} expected)")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise NotRegular(f"a file of more than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise fs_error("read", path, e) from e
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def write_atomic(
    path: Path,
    data: bytes,
    *,
    mode: int = PRIVATE_FILE_MODE,
    dir_fd: int | None = None,
    sync_dir: bool = True,
) -> os.stat_result:
    """Replace ``path`` by ``data``: temp file, fsync, rename, fsync of the directory.

    The temp file is ``.<name>.tmp`` beside ``path`` (a fixed name: callers serialise their
    writers, as the driver's lock does); whatever is planted there (a link, a FIFO, a device)
    is removed, never followed or blocked on. ``mode``: the file's mode whatever the umask
    (:data:`PRIVATE_FILE_MODE` for state, :data:`PUBLIC_FILE_MODE` for what a container runtime
    reads). ``dir_fd``: an open handle of the directory to fsync (kept by callers that write
    often); without it the directory is opened for the call. ``sync_dir=False`` skips the
    directory's fsync: for files whose loss in a power cut the caller repairs from its own
    durable record (a claim whose CDI spec is missing is prepared again, from its checkpoint
    record).
    Returns the ``fstat`` of the file written.

    Raises:
        OSError: the file system refused (callers turn it into :func:`fs_error`).
        PermanentError: something that is not a plain file keeps coming back at the temp name.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = -1
    for _ in range(3):
        try:
            fd = os.open(tmp, flags, mode)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EWOULDBLOCK):
                raise
            _remove_planted(tmp)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            break
        os.close(fd)
        fd = -1
        _remove_planted(tmp)
    if fd < 0:
        raise PermanentError(f"{tmp} keeps being replaced by something that is not a plain file")
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not sync_dir:
        pass
    elif dir_fd is not None:
        os.fsync(dir_fd)
    else:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return st


def quarantine(path: Path) -> Path:
    """Move a damaged ``path`` aside to ``<name>.corrupt-<UTC time>-<pid>-<random>``; the new path.

    Whatever is there (a file, a directory, a FIFO, a link) is renamed, never opened; every
    copy is kept (the name is unique), for the operator to look at.

    Raises:
        RetryableError: the file system refused.
    """
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return aside
    except OSError as e:
        raise fs_error("move the damaged file aside:", path, e) from e
    return aside


STATE_FILE_API_VERSION: Final = "statefile.drakit.io/v1"
MAX_STATE_FILE_BYTES: Final = 64 * 1024 * 1024
"""A plugin's state file larger than this is treated as damage."""

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Damage:
    """A state file found damaged and moved aside.

    Attributes:
        path: the state file's path.
        reason: what was wrong, in words (``it is a FIFO``, ``checksum mismatch``).
        moved_to: where the damaged file now is.
    """

    path: Path
    reason: str
    moved_to: Path

    def __str__(self) -> str:
        return (
            f"state file {self.path} was unreadable ({self.reason}); moved to "
            f"{self.moved_to.name} beside it"
        )


class _Bad(Exception):
    """What is wrong with a state file's content."""


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


class StateFile:
    """One JSON state file: read (quarantined when damaged) and written atomically.

    On disk: ``{"apiVersion": "statefile.drakit.io/v1", "kind": <kind>, "checksum": <SHA-256
    of the canonical JSON of data>, "data": <data>}``. Callers serialise access (a backend's
    hooks for one driver already are, see ``drakit_prepare_devices``; :meth:`StateDir.lock`
    serialises anything else).

    Args:
        path: the file.
        kind: what the file holds (``VfLedger``); a file of another kind is damage.
        max_bytes: a larger file is damage.
    """

    def __init__(self, path: Path, *, kind: str, max_bytes: int = MAX_STATE_FILE_BYTES) -> None:
        self.path = path
        self.kind = kind
        self.max_bytes = max_bytes
        self.damage: Damage | None = None
        """The damage the last :meth:`read` found and moved aside (``None``: none)."""

    def read(self) -> Any | None:
        """The data last written; ``None`` when there is no file or it was damaged.

        A damaged file is moved aside (:func:`quarantine`), logged, and described in
        :attr:`damage`; a caller that cannot rebuild what it held from other evidence should
        refuse work and name ``damage`` (the operator looks at the file moved aside).

        Raises:
            RetryableError: the file system refused (permission, I/O error).
        """
        self.damage = None
        try:
            raw = read_regular(self.path, self.max_bytes)
            if raw is None:
                return None
            return self._decode(raw)
        except NotRegular as e:
            reason = f"it is {e}"
        except _Bad as e:
            reason = str(e)
        self.damage = Damage(self.path, reason, quarantine(self.path))
        log.error("%s", self.damage)
        return None

    def _decode(self, raw: bytes) -> Any:
        try:
            doc = json.loads(raw)
        except RecursionError:
            raise _Bad("its JSON is nested too deeply") from None
        except ValueError as e:
            raise _Bad(f"not JSON: {str(e).splitlines()[0][:200]}") from None
        if not isinstance(doc, dict) or doc.get("apiVersion") != STATE_FILE_API_VERSION:
            raise _Bad(f"not a drakit state file ({STATE_FILE_API_VERSION})")
        if doc.get("kind") != self.kind:
            raise _Bad(f"kind {str(doc.get('kind'))[:64]!r}, not {self.kind!r}")
        data = doc.get("data")
        try:
            digest = hashlib.sha256(_canonical(data)).hexdigest()
        except (RecursionError, ValueError):
            raise _Bad("its data cannot be encoded again") from None
        if doc.get("checksum") != digest:
            raise _Bad("checksum mismatch")
        return data

    def write(self, data: Any) -> None:
        """Replace the file by ``data`` (JSON-serialisable) atomically; directories 0700.

        Raises:
            RetryableError: the file system refused (read-only, no space).
            PermanentError: the directory is a link or not a directory.
        """
        body = _canonical(data)
        doc = (
            f'{{"apiVersion":"{STATE_FILE_API_VERSION}","kind":{json.dumps(self.kind)},'
            f'"checksum":"{hashlib.sha256(body).hexdigest()}","data":'
        ).encode()
        ensure_dir(self.path.parent)
        try:
            write_atomic(self.path, doc + body + b"}\n")
        except OSError as e:
            raise fs_error("write the state file", self.path, e) from e


def _unset() -> Path | None:
    return None


@dataclass(frozen=True)
class StateDir:
    """A backend's own directory under the node's ``--state-dir`` (0700, created on first write).

    ``path`` is ``None`` where there is no node (a context built by hand in a test): using it
    then raises :class:`~drakit.errors.PermanentError`.
    """

    path: Path | None = field(default_factory=_unset)
    _locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False, compare=False)

    def _dir(self) -> Path:
        if self.path is None:
            raise PermanentError(
                "this plugin context has no state directory (it was not built by a node's "
                "plugin host); pass state=StateDir(path) when building it"
            )
        return self.path

    def file(self, name: str, *, kind: str, max_bytes: int = MAX_STATE_FILE_BYTES) -> StateFile:
        """The state file ``name`` (one file-name component) in this directory.

        Raises:
            PermanentError: ``name`` is not a plain file name, or there is no directory.
        """
        if not _NAME.fullmatch(name) or ".." in name:
            raise PermanentError(
                f"state file name {name!r}: use letters, digits, '.', '_' and '-', starting "
                "with a letter or digit, at most 128 characters"
            )
        return StateFile(self._dir() / name, kind=kind, max_bytes=max_bytes)

    @contextlib.contextmanager
    def lock(self, name: str = "state.lock") -> Iterator[None]:
        """Hold ``name``'s lock: a thread lock and an ``flock`` on the file (0600, no links).

        Serialises this process's threads and the two instances of a rolling update. A FIFO,
        link or directory planted at the lock's name is removed (a directory: refused), never
        blocked on.

        Raises:
            RetryableError: the file system refused.
            PermanentError: a directory is where the lock file belongs.
        """
        path = self.file(name, kind="lock").path
        thread_lock = self._locks.setdefault(name, threading.Lock())
        with thread_lock:
            ensure_dir(path.parent)
            fd = open_private(path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock
