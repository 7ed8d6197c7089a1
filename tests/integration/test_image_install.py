"""What the image contains, installed the way deployments/Dockerfile installs it.

No container builder can be checked here (the CI reaches no container registry for the base
image), so this builds what the image's build stage builds: the lock's dependencies with their
hashes plus wheels of this checkout, in a clean virtual environment (``deployments/image/
install.sh``, which the Dockerfile runs), and runs ``drakit --version`` and ``drakit plugins``
from it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helmchart import REPO_ROOT
from tests.uvbin import uv

INSTALL = REPO_ROOT / "deployments" / "image" / "install.sh"
BACKENDS = {
    "cpu": "drakit-cpu",
    "nvidia_gpu": "drakit-nvidia-gpu",
    "amd_gpu": "drakit-amd-gpu",
    "amd_ainic": "drakit-amd-ainic",
    "composite": "drakit-composite",
}

pytestmark = pytest.mark.slow


def base_python() -> str:
    """The interpreter the test run's virtualenv was made from (the image has no virtualenv)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


def install(venv: Path, wheels: Path) -> subprocess.CompletedProcess[str]:
    # The caller's environment (certificates, proxies), minus the test run's virtualenv.
    env = {
        k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT"}
    }
    env |= {"UV": uv(), "DRAKIT_IMAGE_PYTHON": base_python()}
    return subprocess.run(
        ["bash", str(INSTALL), str(venv), str(wheels)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("image")
    proc = install(base / "venv", base / "wheels")
    assert proc.returncode == 0, proc.stderr
    return base / "venv"


def test_version(image_venv: Path) -> None:
    out = subprocess.run(
        [str(image_venv / "bin" / "drakit"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == f"drakit, version {importlib.metadata.version('drakit')}\n"


def test_plugins_are_the_backends(image_venv: Path) -> None:
    out = subprocess.run(
        [str(image_venv / "bin" / "drakit"), "plugins", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    backends = {r["name"]: r["distribution"] for r in json.loads(out) if r["kind"] == "backend"}
    assert backends == BACKENDS


def test_only_runtime_dependencies(image_venv: Path) -> None:
    listed = subprocess.run(
        [uv(), "pip", "list", "--python", str(image_venv / "bin" / "python"), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {p["name"] for p in json.loads(listed)}
    assert {"drakit", *BACKENDS.values(), "kubernetes", "grpcio", "pydantic"} <= names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "drakit-example-thirdparty"}


def test_refuses_an_existing_directory(tmp_path: Path) -> None:
    proc = install(tmp_path, tmp_path / "wheels")
    assert proc.returncode == 1
    assert "exists; give a path for a new virtual environment" in proc.stderr
