"""File-system helpers for everything drakit creates on a node: names, modes, no links.

``drakit node`` runs privileged; every path it builds from input (a claim UID, a driver name)
must stay inside its directory, every file or directory it creates has an explicit mode that does
not depend on the process umask, and it never follows a symbolic link planted where it creates,
reads or removes a file of its own. File-system failures are reported as what they are (a
read-only file system, no space left) and are retryable.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Final

from drakit.errors import PermanentError, RetryableError

__all__ = [
    "DIR_MODE",
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "PUBLIC_FILE_MODE",
    "NotRegular",
    "check_component",
    "ensure_dir",
    "fs_error",
    "open_private",
    "read_regular",
]

PRIVATE_DIR_MODE: Final = 0o700
"""State and socket directories: only root (the kubelet, the driver) uses them."""
PRIVATE_FILE_MODE: Final = 0o600
"""Checkpoints, lock files and sockets."""
DIR_MODE: Final = 0o755
"""The CDI directory, when drakit creates it: container runtimes read it."""
PUBLIC_FILE_MODE: Final = 0o644
"""CDI specs: read by the container runtime, written only by drakit."""

_COMPONENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_COMPONENT_BYTES: Final = 255

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


def check_component(value: str, what: str, *, max_bytes: int = MAX_COMPONENT_BYTES) -> str:
    """``value`` if it is usable as one file-name component, else PermanentError naming ``what``.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit (so never ``..``,
    never a separator, never a hidden name), at most ``max_bytes`` bytes.
    """
    if not _COMPONENT.fullmatch(value) or len(value.encode()) > max_bytes or ".." in value:
        shown = value if len(value) <= 80 else value[:77] + "..."  # noqa: PLR2004
        raise PermanentError(
            f"{what} {shown!r} cannot be used in a file name: only letters, digits, '.', '_' "
            f"and '-' are allowed, starting with a letter or digit, no '..', at most "
            f"{max_bytes} bytes"
        )
    return value


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
