"""Every backend, and what ``drakit plugin new`` writes, speak one vocabulary of file names.

The names are the scaffold's (``docs/writing-plugins.md``); a backend with nothing for a name
lacks the file, and may add modules of its own (``topology.py``, ``mig.py``, ...), but a
vocabulary name always holds what it says:

* ``plugin.py``: the class the ``drakit.plugins`` entry point names, with the ``drakit_*``
  hooks; no pydantic model (settings and configs live in their own files);
* ``settings.py``: the backend's :class:`drakit.config.PluginSettings` subclass, the only
  place one is defined;
* ``config.py``: the opaque claim config, a pydantic model with a ``kind`` field, the only
  place one is defined;
* ``discovery.py``: reading the hardware, building no ``Device``;
* ``devices.py``: building the ``Device`` models;
* ``prepare.py``: prepare and unprepare, producing ``PreparedDevice`` records;
* ``health.py``: device health; ``sim/``: simulated hardware, a package (never ``sim.py``).

Hooks (``drakit_*`` functions) are defined in ``plugin.py`` only. The checks read source with
:mod:`ast`, nothing is imported.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from drakit.scaffold import new_plugin

REPO = Path(__file__).resolve().parents[2]
PLUGIN_GROUP = "drakit.plugins"


def backends() -> list[tuple[str, Path, str]]:
    """``(entry point name, package directory, entry point target)`` of every backend here."""
    out = []
    for pyproject in sorted(REPO.glob("plugins/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        for name, target in project.get("entry-points", {}).get(PLUGIN_GROUP, {}).items():
            package = target.split(".", 1)[0]
            out.append((name, pyproject.parent / "src" / package, target))
    return out


def _bases(cls: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in cls.bases}


def _classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [n for n in tree.body if isinstance(n, ast.ClassDef)]


def _fields(cls: ast.ClassDef) -> set[str]:
    return {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }


def _models(tree: ast.Module) -> dict[str, ast.ClassDef]:
    """The pydantic models a module defines (``BaseModel``, ``PluginSettings``, or a local base)."""
    found: dict[str, ast.ClassDef] = {}
    for cls in _classes(tree):
        if _bases(cls) & ({"BaseModel", "PluginSettings"} | found.keys()):
            found[cls.name] = cls
    return found


def _settings_classes(tree: ast.Module) -> list[str]:
    return [c.name for c in _classes(tree) if "PluginSettings" in _bases(c)]


def _names(tree: ast.Module) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _called(tree: ast.Module, name: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in ast.walk(tree)
    )


def _hooks(tree: ast.Module) -> list[str]:
    return [
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("drakit_")
    ]


def _misplaced(trees: dict[str, ast.Module]) -> list[str]:
    """Hooks, settings and opaque configs defined outside the file named for them."""
    problems = []
    for rel, tree in trees.items():
        if rel.startswith("sim/"):
            continue
        if rel != "plugin.py" and _hooks(tree):
            problems.append(f"{rel} defines hooks {_hooks(tree)}: hooks live in plugin.py")
        if rel != "settings.py" and _settings_classes(tree):
            problems.append(
                f"{rel} defines settings {_settings_classes(tree)}: settings live in settings.py"
            )
        configs = [c.name for c in _models(tree).values() if "kind" in _fields(c)]
        if rel != "config.py" and configs:
            problems.append(f"{rel} defines opaque config models {configs}: they live in config.py")
    return problems


def _plugin_problems(plugin: ast.Module, cls_name: str) -> list[str]:
    problems = []
    cls = next((c for c in _classes(plugin) if c.name == cls_name), None)
    if cls is None:
        problems.append(f"plugin.py does not define {cls_name}, the entry point's class")
    elif not [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name[:7] == "drakit_"]:
        problems.append(f"plugin.py: {cls_name} has no drakit_* hooks")
    if _models(plugin):
        problems.append(f"plugin.py defines pydantic models {sorted(_models(plugin))}")
    return problems


def _content_problems(trees: dict[str, ast.Module]) -> list[str]:
    """Each vocabulary file that exists holds what its name says."""
    problems = []
    if "settings.py" in trees and not _settings_classes(trees["settings.py"]):
        problems.append("settings.py defines no PluginSettings subclass")
    config = trees.get("config.py")
    if config is not None and not [c for c in _models(config).values() if "kind" in _fields(c)]:
        problems.append("config.py defines no opaque config model (one with a kind field)")
    if "discovery.py" in trees and _called(trees["discovery.py"], "Device"):
        problems.append("discovery.py builds Device models: that is devices.py")
    if "devices.py" in trees and not {"Device", "DeviceInventory"} & _names(trees["devices.py"]):
        problems.append("devices.py builds no Device models")
    if "prepare.py" in trees and "PreparedDevice" not in _names(trees["prepare.py"]):
        problems.append("prepare.py produces no PreparedDevice records")
    return problems


def layout_problems(package: Path, target: str) -> list[str]:
    """What in ``package`` breaks the vocabulary (see the module docstring); empty when none."""
    problems: list[str] = []
    module, _, cls_name = target.partition(":")
    if module != f"{package.name}.plugin":
        problems.append(f"the entry point names {module}, not {package.name}.plugin")
    if (package / "sim.py").exists():
        problems.append("sim.py: simulated hardware is a package, sim/")
    if (package / "sim").exists() and not (package / "sim" / "__init__.py").is_file():
        problems.append("sim/ is not a package")
    if not (package / "settings.py").is_file():
        problems.append("settings.py is missing: every backend has settings (PluginSettings)")
    trees = {
        path.relative_to(package).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(package.rglob("*.py"))
    }
    problems += _misplaced(trees)
    if "plugin.py" not in trees:
        return [*problems, "plugin.py is missing"]
    return problems + _plugin_problems(trees["plugin.py"], cls_name) + _content_problems(trees)


def test_every_backend_is_found() -> None:
    assert {name for name, _, _ in backends()} >= {
        "cpu",
        "nvidia_gpu",
        "amd_gpu",
        "amd_ainic",
        "composite",
    }


@pytest.mark.parametrize(("package", "target"), [(p, t) for _, p, t in backends()], ids=str)
def test_every_backend_speaks_the_vocabulary(package: Path, target: str) -> None:
    assert layout_problems(package, target) == []


def test_the_scaffold_speaks_the_vocabulary(tmp_path: Path) -> None:
    root = new_plugin("acme_fpga", tmp_path / "drakit-acme-fpga")
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [target] = project["entry-points"][PLUGIN_GROUP].values()
    package = root / "src" / "drakit_acme_fpga"
    assert layout_problems(package, target) == []
    for name in ("plugin", "settings", "config", "discovery", "devices", "prepare", "health"):
        assert (package / f"{name}.py").is_file(), name
    assert (package / "sim" / "__init__.py").is_file()


def test_settings_in_plugin_py_are_caught(tmp_path: Path) -> None:
    root = new_plugin("acme_fpga", tmp_path / "drakit-acme-fpga")
    package = root / "src" / "drakit_acme_fpga"
    settings = (package / "settings.py").read_text(encoding="utf-8")
    start = settings.index("class AcmeFpgaSettings")
    plugin = package / "plugin.py"
    plugin.write_text(plugin.read_text(encoding="utf-8") + "\n\n" + settings[start:])
    (package / "settings.py").write_text(settings[:start], encoding="utf-8")
    problems = layout_problems(package, "drakit_acme_fpga.plugin:AcmeFpgaPlugin")
    assert "plugin.py defines settings ['AcmeFpgaSettings']: settings live in settings.py" in (
        problems
    )
    assert "settings.py defines no PluginSettings subclass" in problems
    assert "plugin.py defines pydantic models ['AcmeFpgaSettings']" in problems
