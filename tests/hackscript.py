"""Load a script of ``hack/`` (a file, not a module of a package) to test its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

HACK = Path(__file__).resolve().parents[1] / "hack"


def load_hack_script(name: str) -> ModuleType:
    """``hack/<name>`` imported as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(
        name.removesuffix(".py").replace("-", "_"), HACK / name
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
