"""The NVIDIA driver's user-space files a CUDA container needs, carried by drakit's own CDI spec.

Under plain CDI (containerd or CRI-O with CDI on, no NVIDIA runtime) a container gets only the
edits of the CDI devices it references: drakit's per-claim spec must bring the driver's
libraries itself, or CUDA finds no ``libcuda.so.1``. This module finds them the way the NVIDIA
container toolkit's CDI generation (``nvcdi``, ``nvml`` mode) does, under a configurable
**driver root** (``/``, a driver container's ``/run/nvidia/driver``):

* **libraries**: every ``*.so.<driver version>`` in the root's library directories
  (:data:`LIB_DIRS`; the version is NVML's ``nvmlSystemGetDriverVersion``), with the links the
  host's ``ldconfig`` made to them (``libcuda.so.1 -> libcuda.so.580.126.20``,
  ``libcuda.so -> libcuda.so.1``);
* **binaries**: :data:`BINARIES` (``nvidia-smi``, the MPS control daemon and server, ...) in
  :data:`BIN_DIRS`;
* **IPC sockets**: ``nvidia-persistenced`` and ``nvidia-fabricmanager`` under ``run/`` or
  ``var/run/`` (the MPS pipe directory is mounted only for claims that ask for MPS, see
  ``GpuConfig``);
* **firmware**: ``lib/firmware/nvidia/<version>/gsp*.bin``.

Two layouts, chosen by whether ``nvidia-cdi-hook`` (the toolkit's OCI hook) is on the node:

* **with the hook**: every file is mounted at its path relative to the driver root (as
  ``nvidia-ctk cdi generate`` does), and two ``createContainer`` hooks make the library links
  (``create-symlinks --link <target>::<link>``) and update the container's loader cache
  (``update-ldcache --folder <dir>``), so any image finds the libraries;
* **without it**: the libraries are mounted, under their file names and under each link's
  name, in ``/usr/local/nvidia/lib64``, the binaries in ``/usr/local/nvidia/bin`` (no hooks:
  a bind mount of the file under its link name needs none). CUDA images list these
  directories in ``LD_LIBRARY_PATH`` and ``PATH``; an image that does not must add them.

Files are found on the host at ``<driver root>/<relative path>``; drakit must see the driver
root there too (or at ``driver_root_seen``). The discovery is cached per driver version and
driver root, and made again when NVML reports another driver version.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from drakit.models import CdiHook, CdiMount

__all__ = [
    "BINARIES",
    "BIN_DIRS",
    "CONTAINER_BIN",
    "CONTAINER_LIB",
    "HOOK_NAME",
    "LIB_DIRS",
    "DriverFiles",
    "find_driver_files",
]

LIB_DIRS: Final = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
    "lib",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
)
"""Library directories searched under the driver root (Debian, RHEL, GKE-style layouts)."""
BIN_DIRS: Final = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/nvidia/bin")
BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
"""The driver's binaries ``nvcdi`` mounts (without the IMEX daemon, which drakit does not run)."""
IPC_SOCKETS: Final = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
IPC_DIRS: Final = ("run", "var/run")
HOOK_NAME: Final = "nvidia-cdi-hook"
HOOK_DIRS: Final = ("usr/bin", "usr/local/bin", "usr/local/nvidia/toolkit")
CONTAINER_LIB: Final = "/usr/local/nvidia/lib64"
CONTAINER_BIN: Final = "/usr/local/nvidia/bin"
_FILE_OPTIONS: Final = ("ro", "nosuid", "nodev", "rbind", "rprivate")
_IPC_OPTIONS: Final = ("nosuid", "nodev", "rbind", "rprivate", "noexec")
_MAX_LINK_HOPS: Final = 8


@dataclass(frozen=True)
class DriverFiles:
    """What a container needs of the driver, as CDI edits (the same for every GPU).

    Attributes:
        version: the driver version the files were found for.
        mounts: the bind mounts (libraries, binaries, sockets, firmware).
        hooks: the ``nvidia-cdi-hook`` hooks (empty without the hook).
        libcuda: the host path of ``libcuda.so.<version>`` (``None``: not found).
        hook: the host path of ``nvidia-cdi-hook`` (``None``: not used).
        env: environment the files come with (the toolkit's ``NVIDIA_CTK_LIBCUDA_DIR``).
        source: who found them: ``own`` (this module) or ``toolkit`` (``nvidia-ctk cdi
            generate``, :mod:`.toolkit`).
    """

    version: str
    mounts: tuple[CdiMount, ...]
    hooks: tuple[CdiHook, ...]
    libcuda: str | None
    hook: str | None
    env: tuple[str, ...] = ()
    source: str = "own"


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _exists(path: Path) -> bool:
    try:
        path.lstat()
    except OSError:
        return False
    return True


def _links_to(directory: Path, names: list[str], target: str) -> list[tuple[str, str]]:
    """``(link name, its text)`` of every link in ``directory`` that ends at ``target``."""
    out = []
    for name in names:
        path = directory / name
        try:
            text = os.readlink(path)
        except OSError:
            continue
        here, hops = text, 0
        while hops < _MAX_LINK_HOPS and "/" not in here and here != target:
            try:
                here = os.readlink(directory / here)
            except OSError:
                break
            hops += 1
        if here == target:
            out.append((name, text))
    return out


def find_driver_files(
    root: Path,
    host_root: str,
    version: str,
    *,
    hook: str | None = None,
    find_hook: bool = True,
) -> DriverFiles:
    """The driver's files under ``root`` (where this process sees the driver root).

    Args:
        root: the driver root as seen by this process.
        host_root: the same directory's path on the host (the mounts' ``hostPath`` prefix).
        version: the driver version (``580.126.20``); libraries are ``*.so.<version>``.
        hook: the host path of ``nvidia-cdi-hook`` (the runtime runs it on the host; drakit
            does not check it); ``None``: looked up in :data:`HOOK_DIRS` under the driver root
            when ``find_hook``.
        find_hook: look the hook up when ``hook`` is not given (``False``: the layout without
            hooks).
    """
    host = host_root.rstrip("/")
    if hook is None and find_hook:
        hook = next(
            (f"{host}/{d}/{HOOK_NAME}" for d in HOOK_DIRS if _is_file(root / d / HOOK_NAME)),
            None,
        )
    found = _Found(root, host, with_hooks=hook is not None)
    found.libraries(version)
    if found.libcuda is None:
        return DriverFiles(version=version, mounts=(), hooks=(), libcuda=None, hook=None)
    found.others(version)
    hooks: list[CdiHook] = []
    if hook is not None:
        if found.links:
            args = [HOOK_NAME, "create-symlinks"]
            for link in found.links:
                args += ["--link", link]
            hooks.append(CdiHook(hook_name="createContainer", path=hook, args=tuple(args)))
        args = [HOOK_NAME, "update-ldcache"]
        for folder in found.folders:
            args += ["--folder", folder]
        hooks.append(CdiHook(hook_name="createContainer", path=hook, args=tuple(args)))
    return DriverFiles(
        version=version,
        mounts=tuple(found.mounts),
        hooks=tuple(hooks),
        libcuda=found.libcuda,
        hook=hook,
    )


class _Found:
    """The files found so far, as mounts (and, with the hook, links and loader folders)."""

    def __init__(self, root: Path, host: str, *, with_hooks: bool) -> None:
        self.root = root
        self.host = host
        self.with_hooks = with_hooks
        self.mounts: list[CdiMount] = []
        self.links: list[str] = []
        self.folders: list[str] = []
        self.libcuda: str | None = None

    def mount(self, rel: str, container: str, options: tuple[str, ...] = _FILE_OPTIONS) -> None:
        self.mounts.append(
            CdiMount(host_path=f"{self.host}/{rel}", container_path=container, options=options)
        )

    def libraries(self, version: str) -> None:
        """``*.so.<version>`` in :data:`LIB_DIRS` and the links to them (first directory wins)."""
        suffix = f".so.{version}"
        taken: set[str] = set()
        for d in LIB_DIRS:
            directory = self.root / d
            try:
                if directory.is_symlink() or not directory.is_dir():
                    continue  # lib -> lib64 and the like: the real directory is searched too
                names = sorted(os.listdir(directory))
            except OSError:
                continue
            libs = [
                n
                for n in names
                if n.endswith(suffix) and n not in taken and _is_file(directory / n)
            ]
            if not libs:
                continue
            taken.update(libs)
            if self.with_hooks:
                self.folders.append(f"/{d}")
            for lib in libs:
                rel = f"{d}/{lib}"
                if lib.startswith("libcuda.so."):
                    self.libcuda = f"{self.host}/{rel}"
                if self.with_hooks:  # the file where it is; the hook makes the links
                    self.mount(rel, f"/{rel}")
                    self.links += [f"{t}::/{d}/{n}" for n, t in _links_to(directory, names, lib)]
                else:  # the file under its own name and under each link's
                    self.mount(rel, f"{CONTAINER_LIB}/{lib}")
                    for link, _ in _links_to(directory, names, lib):
                        self.mount(rel, f"{CONTAINER_LIB}/{link}")

    def others(self, version: str) -> None:
        """The binaries, the IPC sockets and the GSP firmware."""
        for name in BINARIES:
            d = next((d for d in BIN_DIRS if _is_file(self.root / d / name)), None)
            if d is not None:
                rel = f"{d}/{name}"
                self.mount(rel, f"/{rel}" if self.with_hooks else f"{CONTAINER_BIN}/{name}")
        for sock in IPC_SOCKETS:
            d = next((d for d in IPC_DIRS if _exists(self.root / d / sock)), None)
            if d is not None:
                self.mount(f"{d}/{sock}", f"/run/{sock}", _IPC_OPTIONS)
        firmware = f"lib/firmware/nvidia/{version}"
        try:
            names = sorted(os.listdir(self.root / firmware))
        except OSError:
            names = []
        for blob in names:
            if blob.startswith("gsp") and blob.endswith(".bin"):
                self.mount(f"{firmware}/{blob}", f"/{firmware}/{blob}")
