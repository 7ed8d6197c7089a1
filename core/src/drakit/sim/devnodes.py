"""Device nodes in a simulated root: the ``/dev`` entries its sysfs promises.

A simulated root holds, under ``<root>/dev``, a node for every device node a real node's
drivers would create for its hardware (``/dev/nvidia0``, ``/dev/kfd``, ``/dev/dri/renderD128``,
``/dev/infiniband/uverbs0``, ...), so a CDI spec's ``hostPath`` points at something a container
runtime can read and runc can recreate in a container. They are real character devices
(``os.mknod``), but with harmless stand-in numbers, never the hardware's own: a container that
opens one gets the memory device whose numbers it borrows.

* :data:`DEVICE_STAND_IN` (1:3, ``/dev/null``) for a device's own node (a GPU, a render node,
  a uverbs device, a MIG capability);
* :data:`CONTROL_STAND_IN` (1:5, ``/dev/zero``) for a driver's shared control node
  (``nvidiactl``, ``nvidia-uvm``, ``kfd``, ``rdma_cm``).

Both are in every container runtime's default device allow-list, and reading or writing them
changes nothing. Creating a character device needs ``CAP_MKNOD``: without it (drakit run as
a user, in a user namespace) the node is an empty regular file instead, with one warning per
process, so the simulator and everything above it still work; only a container runtime cannot
use such a node (drakit's prepare accepts it only in a simulated root).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import threading
from pathlib import Path
from typing import Final

__all__ = [
    "CONTROL_STAND_IN",
    "DEVICE_STAND_IN",
    "make_device_node",
    "remove_device_node",
]

logger = logging.getLogger(__name__)

DEVICE_STAND_IN: Final = (1, 3)
"""Major and minor of a device's own simulated node: those of ``/dev/null``."""
CONTROL_STAND_IN: Final = (1, 5)
"""Major and minor of a driver's shared simulated control node: those of ``/dev/zero``."""

_warned = threading.Event()


def _host(root: Path | str, path: str) -> str:
    if not path.startswith("/dev/") or ".." in path.split("/"):
        raise ValueError(f"{path!r} is not a device node path under /dev")
    return f"{root}{path}"


def make_device_node(root: Path | str, path: str, *, control: bool = False) -> bool:
    """Create the device node ``path`` (``/dev/...``) under the simulated ``root``.

    A character device with a stand-in number (:data:`CONTROL_STAND_IN` for a shared control
    node, else :data:`DEVICE_STAND_IN`); an empty regular file where the process may not create
    devices. A node that is there already is left as it is (control nodes are shared).

    Returns:
        ``True`` for a character device, ``False`` for the regular-file fallback.

    Raises:
        ValueError: ``path`` is not under ``/dev``.
        OSError: the file system refused anything but the device itself.
    """
    host = _host(root, path)
    os.makedirs(os.path.dirname(host), exist_ok=True)
    major, minor = CONTROL_STAND_IN if control else DEVICE_STAND_IN
    try:
        os.mknod(host, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except FileExistsError:
        return stat.S_ISCHR(os.lstat(host).st_mode)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EACCES):
            raise
        fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        os.close(fd)
        if not _warned.is_set():
            _warned.set()
            logger.warning(
                "simulated device nodes are empty regular files, not character devices: "
                "creating %s failed (%s; creating devices needs CAP_MKNOD, e.g. root). The "
                "simulator works; a container runtime cannot use these nodes",
                host,
                os.strerror(e.errno or 0),
            )
        else:
            logger.debug("simulated device node %s is a regular file", host)
        return False
    # world-readable and -writable whatever the umask, as udev makes these drivers' nodes:
    # a stand-in's numbers are those of /dev/null and /dev/zero, which every process may use
    os.chmod(host, 0o666)  # noqa: S103
    return True


def remove_device_node(root: Path | str, path: str) -> None:
    """Remove the device node ``path`` under ``root`` (nothing if it is not there)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_host(root, path))
