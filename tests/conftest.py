"""Fixtures shared by the cross-package tests (none are autouse).

* ``shm_dir``: a fresh directory in memory (``/dev/shm`` when there is one), for simulated
  profiles: writing a profile on a loaded disk takes tens of seconds, in memory under one.
* ``profile_root``: builds a named simulated profile once per session and returns its root.
* ``clean_drakit_env``: removes ``DRAKIT_*`` variables that would override configuration.
* ``install_entry_point``: installs a throwaway distribution (a module and a ``.dist-info``
  with ``entry_points.txt``) on ``sys.path`` for one test, so the plugin host finds it
  through ``importlib.metadata`` exactly as it finds a pip-installed vendor plugin.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drakit.config import DrakitSettings
from drakit.runtime import fast_tmp
from drakit.sim import build_profile

InstallEntryPoint = Callable[[str, str, str], str]
"""``(group, entry point name, module source) -> module name``."""


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A fresh, memory-backed temporary directory, removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="drakit-test-", dir=fast_tmp()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def profile_root() -> Iterator[Callable[[str], Path]]:
    """``profile_root(name)``: the root of simulated profile ``name``, built once per session.

    Treat the tree as read-only: other tests share it.
    """
    base = Path(tempfile.mkdtemp(prefix="drakit-profiles-", dir=fast_tmp()))
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build_profile(name, base / name)
        return built[name]

    yield get
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def clean_drakit_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset every ``DRAKIT_<setting>`` variable so a developer's shell cannot leak in."""
    import os

    settings = {f"DRAKIT_{name.upper()}" for name in DrakitSettings.model_fields}
    for var in list(os.environ):
        if var in settings or any(var.startswith(f"{s}__") for s in settings):
            monkeypatch.delenv(var)


@pytest.fixture
def install_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InstallEntryPoint]:
    """Install throwaway entry points for one test; see the module docstring.

    Each call writes a new module (named ``drakit_throwaway_<n>``) with ``source`` and a
    distribution exposing ``<module>:<object>`` under ``group``. ``source`` must define the
    object named ``Plugin``; the entry point targets it.
    """
    site = tmp_path / "site"
    site.mkdir()
    modules: list[str] = []

    def install(group: str, name: str, source: str) -> str:
        module = f"drakit_throwaway_{len(modules)}_{tmp_path.name.replace('-', '_')}"
        modules.append(module)
        (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = site / f"{module}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n",
            encoding="utf-8",
        )
        (info / "entry_points.txt").write_text(
            f"[{group}]\n{name} = {module}:Plugin\n", encoding="utf-8"
        )
        return module

    monkeypatch.syspath_prepend(str(site))
    yield install
    for module in modules:
        sys.modules.pop(module, None)
