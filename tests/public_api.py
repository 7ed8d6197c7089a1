"""The public API as written down: docs/compatibility.md's table and .importlinter's contract.

Shared by the tests that hold drakit's modules (``tests/unit/test_public_api.py``) and the code
``drakit plugin new`` generates (``tests/integration/test_scaffold.py``) to that list.
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPATIBILITY_MD = REPO_ROOT / "docs" / "compatibility.md"
IMPORTLINTER = REPO_ROOT / ".importlinter"
CONTRACT = "importlinter:contract:plugins-public-api"

_ROW = re.compile(r"^\| `(drakit(?:\.\w+)?)` \| [^|]+ \| ([^|]+) \|$")


def public_modules() -> dict[str, str]:
    """Public module -> where it may be imported (``anywhere``, ``tests only``, ...)."""
    out: dict[str, str] = {}
    for line in COMPATIBILITY_MD.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def forbidden_modules(contract: str = CONTRACT) -> list[str]:
    """The ``forbidden_modules`` of an ``.importlinter`` contract, in file order."""
    parser = configparser.ConfigParser()
    parser.read(IMPORTLINTER, encoding="utf-8")
    return [m.strip() for m in parser[contract]["forbidden_modules"].split("\n") if m.strip()]


def drakit_imports(source: str) -> set[str]:
    """Every ``drakit`` module a Python source imports (``from drakit.x import y`` -> drakit.x)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out.update(n for n in names if n == "drakit" or n.startswith("drakit."))
    return out


def top_level(module: str) -> str:
    """``drakit.sim.ainic`` -> ``drakit.sim``; ``drakit`` -> ``drakit``."""
    return ".".join(module.split(".")[:2])
