"""The driver's files from the NVIDIA container toolkit: ``nvidia-ctk cdi generate``.

Where the toolkit is installed on the node, its CDI generator knows the driver's files best
(graphics and compat libraries, the ``enable-cuda-compat`` hook, what a new driver adds). With
``driver_files: auto`` (when ``nvidia-ctk`` is found) or ``toolkit``, drakit runs::

    nvidia-ctk cdi generate --format=json --mode=<toolkit_mode> --driver-root=<seen root>
        --dev-root=<toolkit_dev_root> --nvidia-cdi-hook-path=<host path of nvidia-cdi-hook>

and takes the spec's **common** ``containerEdits`` (the edits every device of the toolkit's
spec carries): its mounts (libraries, binaries, IPC sockets, firmware), its hooks
(``create-symlinks``, ``update-ldcache``, ``enable-cuda-compat``, ...) and its environment,
without what belongs to the toolkit's own device selection (``NVIDIA_VISIBLE_DEVICES=void``
and the ``/var/run/nvidia-container-devices`` mount that goes with it). The toolkit's device
nodes are not taken: drakit gives each claim its own GPUs' nodes.

The toolkit's JSON is validated with pydantic (:class:`ToolkitSpec`: drakit's typed CDI models,
unknown keys refused), host paths under the driver root as drakit sees it are rewritten to the
host's driver root, and the driver version the toolkit found (the ``libcuda.so.<version>`` it
mounts) must be the one NVML reports. The result is kept in the plugin's state directory
(``toolkit-cdi.json``, written atomically, 0600) with the driver version and the command it
came from, so a restarted drakit does not run the toolkit again; NVML reporting another driver
version (or other settings) runs it again.

``management`` mode (the default) finds the driver's files by their names and runs without
NVML (it needs the NVIDIA device nodes under the dev root); ``nvml`` mode asks NVML through the
driver's ``libnvidia-ml`` and adds the graphics libraries.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import PermanentError, RetryableError
from drakit.models import CdiDeviceNode, CdiHook, CdiMount, EnvEntry
from drakit.statefiles import StateDir
from drakit_nvidia_gpu.driverfiles import HOOK_DIRS, HOOK_NAME, DriverFiles

__all__ = [
    "CACHE_FILE",
    "CACHE_KIND",
    "CTK_DIRS",
    "CTK_NAME",
    "ToolkitEdits",
    "ToolkitError",
    "ToolkitRun",
    "ToolkitSpec",
    "find_ctk",
    "find_hook",
    "toolkit_driver_files",
]

log = logging.getLogger(__name__)

CTK_NAME: Final = "nvidia-ctk"
CTK_DIRS: Final = ("usr/bin", "usr/local/bin", "usr/local/nvidia/toolkit")
"""Where ``nvidia_ctk: auto`` looks under the driver root as drakit sees it (after PATH)."""
CACHE_FILE: Final = "toolkit-cdi.json"
CACHE_KIND: Final = "NvidiaToolkitCdi"
VOID_DIR: Final = "/var/run/nvidia-container-devices"
"""The toolkit's channel for its legacy device selection: not taken into a claim's spec."""
_MAX_OUTPUT: Final = 8 * 2**20
_STDERR_TAIL: Final = 6


class ToolkitError(Exception):
    """``nvidia-ctk cdi generate`` could not give the driver's files (the message says why)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ToolkitEdits(_Strict):
    """A CDI ``containerEdits`` object as the toolkit writes it (CDI's spelling)."""

    env: tuple[EnvEntry, ...] = ()
    device_nodes: tuple[CdiDeviceNode, ...] = Field(default=(), alias="deviceNodes")
    mounts: tuple[CdiMount, ...] = ()
    hooks: tuple[CdiHook, ...] = ()
    additional_gids: tuple[int, ...] = Field(default=(), alias="additionalGids")


class ToolkitDevice(_Strict):
    """A CDI ``devices`` entry of the toolkit's spec."""

    name: str = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    container_edits: ToolkitEdits = Field(default_factory=ToolkitEdits, alias="containerEdits")


class ToolkitSpec(_Strict):
    """The CDI spec ``nvidia-ctk cdi generate --format=json`` prints."""

    cdi_version: str = Field(alias="cdiVersion", min_length=1)
    cdi_kind: str = Field(alias="kind", min_length=1, description="nvidia.com/gpu")
    annotations: dict[str, str] = Field(default_factory=dict)
    devices: tuple[ToolkitDevice, ...] = ()
    container_edits: ToolkitEdits = Field(default_factory=ToolkitEdits, alias="containerEdits")


def _is_exec(path: Path) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111)


def find_ctk(setting: str, seen_root: Path) -> str | None:
    """``nvidia-ctk`` as this process runs it (``setting``: ``auto`` or an absolute path)."""
    if setting != "auto":
        return setting if _is_exec(Path(setting)) else None
    found = shutil.which(CTK_NAME)
    if found is not None:
        return found
    return next(
        (str(seen_root / d / CTK_NAME) for d in CTK_DIRS if _is_exec(seen_root / d / CTK_NAME)),
        None,
    )


def find_hook(setting: str, seen_root: Path, host_root: str) -> str | None:
    """The host path of ``nvidia-cdi-hook`` for the toolkit's spec (``cdi_hook``)."""
    if setting.startswith("/"):
        return setting
    host = host_root.rstrip("/")
    dirs = (*HOOK_DIRS, *(d for d in CTK_DIRS if d not in HOOK_DIRS))
    return next(
        (f"{host}/{d}/{HOOK_NAME}" for d in dirs if _is_exec(seen_root / d / HOOK_NAME)), None
    )


@dataclass(frozen=True)
class ToolkitRun:
    """One ``nvidia-ctk cdi generate`` invocation and how to read its paths.

    Attributes:
        ctk: ``nvidia-ctk`` as this process runs it.
        seen_root: the driver root as this process (and so ``nvidia-ctk``) sees it.
        host_root: the same directory on the host (the spec's ``hostPath`` prefix).
        dev_root: ``--dev-root``, as this process sees it.
        hook: ``--nvidia-cdi-hook-path``, the hook's path on the host.
        mode: ``--mode``.
        timeout: seconds the command may run.
        setting: the settings section, for messages (``plugins.nvidia_gpu``).
    """

    ctk: str
    seen_root: Path
    host_root: str
    dev_root: Path
    hook: str
    mode: str
    timeout: float
    setting: str

    def argv(self) -> list[str]:
        """The command line."""
        return [
            self.ctk,
            "cdi",
            "generate",
            "--format=json",
            "--output=",
            f"--mode={self.mode}",
            f"--driver-root={self.seen_root}",
            f"--dev-root={self.dev_root}",
            f"--nvidia-cdi-hook-path={self.hook}",
        ]

    def generate(self) -> dict[str, Any]:
        """Run the command; its JSON spec.

        Raises:
            ToolkitError: it could not run, failed, ran out of time or printed no JSON.
        """
        argv = self.argv()
        # NVIDIA_CTK_* variables override the toolkit's flags (an output file, another mode)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_CTK_")}
        try:
            done = subprocess.run(
                argv, capture_output=True, timeout=self.timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired:
            raise ToolkitError(
                f"{' '.join(argv)} did not finish in {self.timeout:g} s; raise "
                f"{self.setting}.toolkit_timeout or check the toolkit"
            ) from None
        except OSError as e:
            raise ToolkitError(
                f"{self.ctk} could not be run ({e.strerror or e}); set {self.setting}.nvidia_ctk "
                "to an nvidia-ctk this process can run"
            ) from None
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-_STDERR_TAIL:]
            raise ToolkitError(
                f"{' '.join(argv)} exited {done.returncode}: {' / '.join(tail) or 'no message'}"
                f"; check {self.setting}.driver_root, toolkit_dev_root and toolkit_mode"
            )
        if len(done.stdout) > _MAX_OUTPUT:
            raise ToolkitError(f"{' '.join(argv)} printed more than {_MAX_OUTPUT} bytes")
        try:
            doc = json.loads(done.stdout)
        except ValueError as e:
            raise ToolkitError(f"{' '.join(argv)} printed no JSON spec ({e})") from None
        if not isinstance(doc, dict):
            raise ToolkitError(f"{' '.join(argv)} printed JSON that is not a CDI spec")
        return doc


def _parse(doc: dict[str, Any], what: str) -> ToolkitSpec:
    try:
        return ToolkitSpec.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ToolkitError(
            f"{what}: a CDI spec drakit does not take ({e.error_count()} problem(s); first: "
            f"{where}: {first['msg']}); use driver_files: own, or a toolkit version drakit "
            "knows (docs/gpu-backends.md)"
        ) from None


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (with a leading ``/``), or ``None`` when outside it."""
    base = root.rstrip("/")
    if not base:
        return path
    if path == base:
        return "/"
    if path.startswith(base + "/"):
        return path[len(base) :]
    return None


def _from_spec(spec: ToolkitSpec, run: ToolkitRun, version: str) -> DriverFiles:
    """The common edits, for drakit's claims (see the module docstring)."""
    edits = spec.container_edits
    host = run.host_root.rstrip("/")
    mounts = []
    libcuda = []
    for m in edits.mounts:
        if m.container_path == VOID_DIR or m.container_path.startswith(VOID_DIR + "/"):
            continue
        rel = _under(m.host_path, str(run.seen_root))
        if rel is None:
            raise ToolkitError(
                f"{' '.join(run.argv())}: mount {m.host_path} -> {m.container_path} is outside "
                f"the driver root {run.seen_root}; drakit cannot say where it is on the host"
            )
        mounts.append(m.model_copy(update={"host_path": f"{host}{rel}"}))
        name = m.container_path.rsplit("/", 1)[-1]
        if name.startswith("libcuda.so."):
            libcuda.append((name.removeprefix("libcuda.so."), f"{host}{rel}"))
    if not libcuda:
        raise ToolkitError(
            f"{' '.join(run.argv())}: the toolkit's spec mounts no libcuda.so.<version>; check "
            f"{run.setting}.driver_root"
        )
    found = [path for v, path in libcuda if v == version]
    if not found:
        raise ToolkitError(
            f"{' '.join(run.argv())}: the toolkit found driver "
            f"{', '.join(sorted({v for v, _ in libcuda}))} but NVML reports {version}; check "
            f"{run.setting}.driver_root (the running driver's files must be under it)"
        )
    env = tuple(e for e in edits.env if not e.startswith("NVIDIA_VISIBLE_DEVICES="))
    return DriverFiles(
        version=version,
        mounts=tuple(mounts),
        hooks=edits.hooks,
        libcuda=found[0],
        hook=run.hook,
        env=env,
        source="toolkit",
    )


def toolkit_driver_files(run: ToolkitRun, version: str, state: StateDir | None) -> DriverFiles:
    """The driver's files from the toolkit, from the cache when it holds this run's spec.

    Args:
        run: the command and its roots.
        version: the driver version NVML reports (the cache's key with the command).
        state: the plugin's state directory (``None``: no cache).

    Raises:
        ToolkitError: the toolkit gave no usable spec (the message names the setting to fix).
        RetryableError: the cache could not be read (the file system refused).
    """
    key = {"driver_version": version, "argv": run.argv(), "host_root": run.host_root}
    cache = state.file(CACHE_FILE, kind=CACHE_KIND) if state is not None else None
    data = cache.read() if cache is not None else None
    if isinstance(data, dict) and data.get("key") == key and isinstance(data.get("spec"), dict):
        try:
            return _from_spec(_parse(data["spec"], f"cached {CACHE_FILE}"), run, version)
        except ToolkitError:
            pass  # made by another drakit: run the toolkit again
    doc = run.generate()
    files = _from_spec(_parse(doc, " ".join(run.argv())), run, version)
    if cache is not None:
        try:
            cache.write({"key": key, "spec": doc})
        except (RetryableError, PermanentError) as e:  # the files are good; only not kept
            log.warning("%s: the toolkit's spec is not cached (%s)", run.setting, e)
    return files
