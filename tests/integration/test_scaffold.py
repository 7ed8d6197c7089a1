"""``drakit plugin new``: the generated package works out of the box, outside this repository.

The package is generated in a temporary directory outside the checkout and installed into a
fresh virtual environment with drakit from this checkout (editable) and nothing else of the
repository: no workspace, no test fixtures, no other backend. There it runs its own tests (which
include drakit's contract suite over the real kubelet sockets), ``mypy --strict`` with the
pydantic plugin, ``ruff``, and ``drakit plugins``: the commands docs/writing-plugins.md shows.
uv's cache makes the install take seconds; the first run on a machine downloads the
dependencies from PyPI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.public_api import REPO_ROOT, drakit_imports, public_modules, top_level
from tests.uvbin import uv

pytestmark = pytest.mark.slow

NAME = "acme_fpga"
CLI = "from drakit.commands.cli import main; main()"
MYPY_CACHE = Path.home() / ".cache" / "drakit" / "scaffold-mypy"


def clean_env() -> dict[str, str]:
    """The caller's environment (certificates, proxies, uv's cache) minus this test run's."""
    dropped = {"VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTEST_ADDOPTS"}
    return {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("DRAKIT_")}


@dataclass(frozen=True)
class Generated:
    package: Path
    venv: Path

    def run(self, tool: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        env = clean_env()
        # mypy reads all of drakit's types; cold that takes a minute on a loaded machine, so its
        # cache outlives the temporary package (it is keyed by file contents, never stale)
        env["MYPY_CACHE_DIR"] = str(MYPY_CACHE)
        return subprocess.run(
            [str(self.venv / "bin" / tool), *args],
            cwd=self.package,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )


def _check(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (
        f"{proc.args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def generated() -> Iterator[Generated]:
    base = Path(tempfile.mkdtemp(prefix="drakit-scaffold-"))
    assert not base.resolve().is_relative_to(REPO_ROOT), "must be outside the repository"
    try:
        package = base / "drakit-acme-fpga"
        new = subprocess.run(
            [
                sys.executable,
                "-c",
                "from drakit.commands.cli import main; main()",
                "plugin",
                "new",
                NAME,
                "--dir",
                str(package),
            ],
            capture_output=True,
            text=True,
            check=False,
            env=clean_env(),
        )
        _check(new)
        venv = base / "venv"
        _check(
            subprocess.run(
                [uv(), "venv", "--quiet", "--python", sys.executable, str(venv)],
                capture_output=True,
                text=True,
                check=False,
                env=clean_env(),
            )
        )
        install = [uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
        install += ["-e", str(REPO_ROOT / "core"), "-e", str(package), "pytest", "mypy", "ruff"]
        _check(
            subprocess.run(
                install, capture_output=True, text=True, check=False, timeout=600, env=clean_env()
            )
        )
        yield Generated(package=package, venv=venv)
    finally:
        shutil.rmtree(base, ignore_errors=True)


WRITING_PLUGINS = REPO_ROOT / "docs" / "writing-plugins.md"


def doc_commands() -> list[list[str]]:
    """The ``uv run --no-sync ...`` lines of writing-plugins.md's ``sh`` blocks, as argv."""
    text = WRITING_PLUGINS.read_text(encoding="utf-8")
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    prefix = "uv run --no-sync "
    return [
        line.removeprefix(prefix).split()
        for block in blocks
        for line in block.splitlines()
        if line.startswith(prefix)
    ]


def test_the_doc_shows_the_checks() -> None:
    tools = [argv[0] for argv in doc_commands()]
    assert {"pytest", "mypy", "ruff", "drakit"} <= set(tools)


def test_nothing_of_the_repository_is_in_the_package(generated: Generated) -> None:
    files = sorted(p.relative_to(generated.package) for p in generated.package.rglob("*"))
    assert not any(p.is_symlink() for p in generated.package.rglob("*"))
    pyproject = (generated.package / "pyproject.toml").read_text(encoding="utf-8")
    assert "workspace" not in pyproject
    assert re.search(r'dependencies = \["drakit>=\d+\.\d+', pyproject)
    assert Path("src/drakit_acme_fpga/plugin.py") in files


def test_generated_code_imports_only_public_modules(generated: Generated) -> None:
    public = public_modules()
    for path in sorted(generated.package.rglob("*.py")):
        rel = path.relative_to(generated.package)
        for module in drakit_imports(path.read_text(encoding="utf-8")):
            where = public.get(top_level(module))
            assert where is not None, f"{rel} imports {module}, which is not public"
            if rel.parts[0] == "tests" or where == "anywhere":
                continue
            assert where.startswith("tests and simulated-profile"), f"{rel} imports {module}"
            assert rel.parts[-2] == "sim", f"{rel} imports {module}, which is for {where}"


@pytest.mark.parametrize("argv", doc_commands(), ids=" ".join)
def test_the_doc_commands_pass(generated: Generated, argv: list[str]) -> None:
    if argv[:2] == ["drakit", "discover"]:
        profiles = _check(generated.run("drakit", "profiles"))
        if "acme-fpga-4card" not in profiles:
            pytest.skip("this drakit does not read the drakit.profiles entry point group")
    out = _check(generated.run(*argv))
    if argv[0] == "pytest":
        passed = re.search(r"\b(\d+) passed\b", out)
        assert passed, out
        assert int(passed.group(1)) >= 10, out  # its own tests and the contract suite's
        assert "failed" not in out, out
        assert "skipped" not in out, out


def test_drakit_plugins_lists_the_backend_and_no_test_fixture(generated: Generated) -> None:
    rows = json.loads(_check(generated.run("drakit", "plugins", "-o", "json")))
    backends = {r["name"]: r["distribution"] for r in rows if r["kind"] == "backend"}
    assert backends == {NAME: "drakit-acme-fpga"}


def test_mypy_uses_the_pydantic_plugin(generated: Generated) -> None:
    pyproject = (generated.package / "pyproject.toml").read_text(encoding="utf-8")
    assert 'plugins = ["pydantic.mypy"]' in pyproject
    assert "strict = true" in pyproject
