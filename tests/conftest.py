"""Fixtures shared by the cross-package tests (none are autouse).

* ``shm_dir``: a fresh directory in memory (``/dev/shm`` when there is one), for simulated
  profiles: writing a profile on a loaded disk takes tens of seconds, in memory under one.
* ``profile_root``: builds a named simulated profile once per session and returns its root.
* ``clean_drakit_env``: removes ``DRAKIT_*`` variables that would override configuration.
* ``entry_points``: installs throwaway distributions (a module and a ``.dist-info`` with
  ``entry_points.txt``) on ``sys.path`` for one test, so the plugin host finds them through
  ``importlib.metadata`` exactly as it finds a pip-installed vendor plugin.

Importing this conftest installs the fixture distributions of ``tests/fixtures/`` (the
``example_fpga`` backend, the ``reverse`` strategy) for the test session only.
"""

from __future__ import annotations

import os

# Before anything imports grpc: the tests start many processes (control plane, drakit node,
# containerd, Kueue) with a preexec_fn, so Python forks with gRPC's threads running; with gRPC's
# fork support on, its handler in the child then sometimes aborted it before exec
# ("Epoll1Poller ... epoll_wait error: Bad file descriptor", then SIGABRT), seen in CI for the
# Kueue manager and a drakit node. The children exec at once and never use gRPC state.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import stevedore  # noqa: TID251 - see the entry_points fixture
from tests.fixtures.install import install_fixture_distributions

from drakit.host.settings import DrakitSettings
from drakit.host.startup import fast_tmp
from drakit.sim import build_profile

# drakit-example-thirdparty is installed for these tests only (see tests/fixtures/install.py)
install_fixture_distributions()


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


class EntryPoints:
    """Throwaway distributions in one ``site`` directory on ``sys.path``; see ``install``."""

    def __init__(self, site: Path) -> None:
        self.site = site
        self.modules: list[str] = []

    def install(self, group: str, name: str, source: str) -> str:
        """Install entry point ``name`` in ``group``, targeting ``Plugin`` in ``source``.

        Writes a new module (``drakit_throwaway_<n>``) and a distribution for it; returns the
        module name. ``source`` is dedented; it must define ``Plugin``.
        """
        module = f"drakit_throwaway_{len(self.modules)}_{self.site.parent.name.replace('-', '_')}"
        self.modules.append(module)
        (self.site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = self.site / f"{module}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n",
            encoding="utf-8",
        )
        (info / "entry_points.txt").write_text(
            f"[{group}]\n{name} = {module}:Plugin\n", encoding="utf-8"
        )
        return module


@pytest.fixture
def entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EntryPoints]:
    """Install throwaway entry points for one test (found through ``importlib.metadata``).

    stevedore keeps each group's entry points for the life of the process; the test gets an
    empty cache, and the previous one (without the throwaway plugins) is restored afterwards.
    """
    site = tmp_path / "site"
    site.mkdir()
    eps = EntryPoints(site)
    monkeypatch.syspath_prepend(str(site))
    # stevedore is only used by drakit.host.pluginhost; here we only reset its process-wide cache
    monkeypatch.setattr(stevedore.ExtensionManager, "ENTRY_POINT_CACHE", {})
    yield eps
    for module in eps.modules:
        sys.modules.pop(module, None)
