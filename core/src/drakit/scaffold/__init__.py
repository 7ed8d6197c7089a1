"""``drakit plugin new``: scaffold a vendor backend distribution from templates.

The templates (``templates/``, package data) are a complete backend for a PCIe card: settings,
a discovery seam over the sysfs root, devices, a hooks-only plugin class, an opaque config
model, a simulated profile registered as a ``drakit.profiles`` entry point, and tests on
:mod:`drakit.testing` including the contract suite. The result depends on drakit like any
other package (``drakit>=<this version>``) and passes ``mypy --strict``, ``ruff`` and its own
tests as generated; ``tests/integration/test_scaffold.py`` proves it in a fresh environment.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import os
import re
import string
from dataclasses import dataclass
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path

from drakit.config import DriverName
from drakit.errors import DrakitError
from drakit.hookspecs import API_VERSION

__all__ = ["Scaffold", "ScaffoldError", "local_drakit", "new_plugin", "render", "scaffold_for"]

_NAME = re.compile(r"^[a-z][a-z0-9]*([_-][a-z0-9]+)*$")
_MAX_NAME = 20  # keeps every generated line within 100 characters (ruff's E501 as configured)
_SUFFIX = ".tmpl"
_RENAMED = {"gitignore": ".gitignore"}


class ScaffoldError(DrakitError):
    """The name, driver or target directory cannot be used; the message says the fix."""


@dataclass(frozen=True)
class Scaffold:
    """The names a generated package uses, all derived from the plugin name.

    Attributes:
        plugin: the entry point / configuration section name (``acme_fpga``).
        dns: the name as a DNS label (``acme-fpga``), for device and profile names.
        dist: the distribution name (``drakit-acme-fpga``).
        module: the import package (``drakit_acme_fpga``).
        cls: the class-name stem (``AcmeFpga``).
        driver: the DRA driver name (``acme-fpga.example.com``).
        profile: the simulated profile's name (``acme-fpga-4card``).
    """

    plugin: str
    dns: str
    dist: str
    module: str
    cls: str
    driver: str
    profile: str
    drakit_source: str | None = None
    """Where ``uv`` finds drakit (a checkout's ``core/`` directory), when not on an index."""

    def uv_sources(self) -> str:
        """The ``[tool.uv.sources]`` block: drakit from :attr:`drakit_source`, or how to add it."""
        if self.drakit_source is not None:
            return (
                "# drakit from a checkout (drakit plugin new --drakit-source): uv builds it from"
                " there.\n"
                "[tool.uv.sources]\n"
                f"drakit = {{ path = {json.dumps(self.drakit_source)}, editable = true }}\n"
            )
        return (
            "# drakit is not on your package index? Point uv at a checkout's core/ directory:\n"
            "# [tool.uv.sources]\n"
            '# drakit = { path = "../drakit/core", editable = true }\n'
        )

    def substitutions(self) -> dict[str, str]:
        """Every ``${...}`` placeholder of the templates."""
        return {
            "plugin": self.plugin,
            "dns": self.dns,
            "dist": self.dist,
            "module": self.module,
            "cls": self.cls,
            "title": self.cls,
            "driver": self.driver,
            "profile": self.profile,
            "profile_func": self.profile.replace("-", "_"),
            "config_api": f"{self.driver}/v1alpha1",
            "env_prefix": self.plugin.upper(),
            "drakit_version": _drakit_version(),
            "api_spec": f">={API_VERSION},<{int(API_VERSION.split('.')[0]) + 1}",
            "uv_sources": self.uv_sources(),
        }


def _drakit_version() -> str:
    try:
        return metadata.version("drakit")
    except metadata.PackageNotFoundError:  # a source tree on sys.path without metadata
        from drakit import __version__  # noqa: PLC0415 - only needed in that case

        return __version__


def local_drakit() -> Path | None:
    """The directory drakit is installed from when it is an editable checkout (else ``None``).

    Read from the installed distribution's ``direct_url.json`` (PEP 610), as ``uv pip install -e
    ../drakit/core`` or drakit's own workspace writes it.
    """
    try:
        text = metadata.distribution("drakit").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    try:
        doc = json.loads(text or "")
    except ValueError:
        return None
    url = str(doc.get("url", "")) if isinstance(doc, dict) else ""
    if not url.startswith("file://") or not (doc.get("dir_info") or {}).get("editable"):
        return None
    path = Path(url.removeprefix("file://"))
    return path if (path / "pyproject.toml").is_file() else None


def scaffold_for(name: str, driver: str | None = None) -> Scaffold:
    """The names for plugin ``name``.

    Raises:
        ScaffoldError: ``name`` is not both a Python identifier and a DNS label once its
            separators are normalised, or ``driver`` is not a DRA driver name.
    """
    plugin = name.replace("-", "_")
    dns = name.replace("_", "-")
    if (
        not _NAME.match(name)
        or not plugin.isidentifier()
        or keyword.iskeyword(plugin)
        or len(name) > _MAX_NAME
    ):
        raise ScaffoldError(
            f"plugin name {name!r} is not usable: it must be a Python identifier and a DNS label"
            " (lower-case letters and digits, words separated by '_' or '-', starting with a"
            " letter, at most 20 characters), e.g. acme_fpga"
        )
    if driver is None:
        driver = f"{dns}.example.com"
    try:
        from pydantic import TypeAdapter  # noqa: PLC0415 - only for this one check

        TypeAdapter(DriverName).validate_python(driver)
    except ValueError as e:
        raise ScaffoldError(
            f"--driver {driver[:80]!r} is not a DRA driver name: use a lower-case DNS subdomain"
            " of at most 63 characters that you control, e.g. acme-fpga.example.com"
        ) from e
    return Scaffold(
        plugin=plugin,
        dns=dns,
        dist=f"drakit-{dns}",
        module=f"drakit_{plugin}",
        cls="".join(part.capitalize() for part in plugin.split("_")),
        driver=driver,
        profile=f"{dns}-4card",
    )


def _templates() -> Traversable:
    return resources.files(__package__) / "templates"


def _walk(node: Traversable, rel: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    out: list[tuple[tuple[str, ...], str]] = []
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            out.extend(_walk(child, (*rel, child.name)))
        elif child.name.endswith(_SUFFIX):
            out.append(((*rel, child.name), child.read_text(encoding="utf-8")))
    return out


def render(names: Scaffold) -> dict[Path, str]:
    """Relative path -> content of every generated file.

    Raises:
        KeyError: a template uses a placeholder :meth:`Scaffold.substitutions` lacks.
    """
    subs = names.substitutions()
    out: dict[Path, str] = {}
    for rel, text in _walk(_templates()):
        parts = [names.module if p == "__module__" else p for p in rel]
        leaf = parts[-1].removesuffix(_SUFFIX)
        parts[-1] = _RENAMED.get(leaf, leaf)
        out[Path(*parts)] = string.Template(text).substitute(subs)
    return out


def new_plugin(
    name: str,
    target: Path | None = None,
    *,
    driver: str | None = None,
    drakit_source: Path | None = None,
) -> Path:
    """Write a new backend distribution for plugin ``name``; return its directory.

    Args:
        name: the plugin name (``acme_fpga`` or ``acme-fpga``).
        target: the directory to create (default ``./drakit-<name>``); it must not exist or be
            empty.
        driver: the DRA driver name (default ``<name>.example.com``).
        drakit_source: a drakit checkout's ``core/`` directory: the package's
            ``[tool.uv.sources]`` builds drakit from it (written relative to the package), so
            ``uv run`` works without drakit on a package index. ``None``: a commented example.

    Raises:
        ScaffoldError: a bad name or driver, a non-empty target directory, or a
            ``drakit_source`` without drakit's ``pyproject.toml``.
    """
    names = scaffold_for(name, driver)
    target = Path(target) if target is not None else Path.cwd() / names.dist
    if drakit_source is not None:
        if not (Path(drakit_source) / "pyproject.toml").is_file():
            raise ScaffoldError(
                f"--drakit-source {drakit_source}: no pyproject.toml there; give the core/ "
                "directory of a drakit checkout"
            )
        source = os.path.relpath(Path(drakit_source).resolve(), target.resolve())
        names = dataclasses.replace(names, drakit_source=Path(source).as_posix())
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(
            f"{target} already exists and is not an empty directory; pass --dir with a new"
            " directory, or remove it first"
        )
    files = render(names)
    target.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)  # never group/other-writable, whatever the umask
    return target
