"""``drakit config validate`` and ``drakit claim validate``: the commands and their offline checks.

Both report :class:`Problem` s: where the mistake is (the file, or the ``DRAKIT_*`` variable that
set the value), the dotted path inside it, and what is wrong with the fix. Nothing here talks to
a cluster or reads hardware.

``config validate`` checks what start-up checks, before start-up: every setting (ranges, names,
unknown keys), that each enabled plugin is installed and accepts its section, that each named
strategy (``strategy``, ``publish_strategy``) is installed, that driver names are DNS
subdomains, and that a plugin's prerequisites are enabled: a setting named ``*_driver`` names
the DRA driver of another plugin, and some enabled plugin must publish it; a setting named
``*_plugins`` names member plugins (``composite``'s ``gpu_plugins`` and ``nic_plugins``): one
of them must be enabled, and each enabled one must publish under the naming plugin's driver.
Once that all holds, it builds the plugin host as ``drakit node`` does (no hardware is read)
and renders the DeviceClasses as ``drakit deviceclasses`` does, so it refuses what they refuse;
and it refuses a plugin's ``strategy`` whose shaped claims that plugin's devices can never
satisfy (``Strategy.backends``).

``claim validate`` checks ResourceClaims, ResourceClaimTemplates and DeviceClasses
(``resource.k8s.io``) as the API server would check their opaque configuration (driver name,
a JSON object of at most 10 KiB, requests that exist), then hands each object whose driver an
installed plugin publishes to that plugin's ``drakit_parse_config``, exactly as a node would
when it prepares the claim.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import TypeAdapter, ValidationError

from drakit.clikit import USER_ERROR
from drakit.config import DriverName, PluginSettings, validation_errors
from drakit.deviceclasses import render_device_classes
from drakit.errors import ConfigInvalid, DrakitError
from drakit.host.loader import (
    PLUGIN_GROUP,
    STRATEGY_GROUP,
    installed_plugins,
    installed_strategies,
    load_entry_points,
)
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import (
    DrakitSettings,
    env_variable,
    known_keys,
    load_settings,
    plugin_drivers,
    read_config_file,
    yaml_shape_problem,
)
from drakit.host.startup import default_sections, effective_settings
from drakit.models import NodeInfo

__all__ = [
    "Problem",
    "claim",
    "claim_validate",
    "config",
    "config_validate",
    "validate_claim_files",
    "validate_config",
]

MAX_OPAQUE_BYTES = 10 * 1024
"""``OpaqueParametersMaxLength``: the API server's limit on one opaque config object."""

_DRIVER: TypeAdapter[str] = TypeAdapter(DriverName)
_KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")


@dataclass(frozen=True)
class Problem:
    """One mistake: its source (a file or a ``DRAKIT_*`` variable), the path in it, the fix."""

    source: str
    path: str
    message: str

    def __str__(self) -> str:
        return (
            f"{self.source}: {self.path}: {self.message}"
            if self.path
            else (f"{self.source}: {self.message}")
        )


# ------------------------------------------------------------------------------ config


def _sourced(file: str, errors: Iterable[tuple[str, str]]) -> list[Problem]:
    """Problems whose source is the variable that set the value, else the file."""
    out = []
    for path, msg in errors:
        var = env_variable(path) if path else None
        text = msg.split(" (set by ", 1)[0] if var else msg
        out.append(Problem(var or file, path, text))
    return out


def validate_config(file: Path) -> tuple[list[Problem], list[str]]:
    """Check a drakit configuration file (with the ``DRAKIT_*`` environment) as start-up would.

    Returns:
        The problems (empty when it is valid) and the names of the enabled plugins.
    """
    problems: list[Problem] = []
    sections: dict[str, Any] = {}
    settings: DrakitSettings | None = None
    try:
        settings = effective_settings(load_settings(file))
        sections = dict(settings.plugins)
    except ConfigInvalid as e:
        problems += _sourced(str(file), e.errors)
        try:  # unreadable or not YAML: already reported
            raw = read_config_file(file).get("plugins")
        except ConfigInvalid:
            raw = None
        if isinstance(raw, dict):
            sections = {str(k): v for k, v in raw.items()}
        elif isinstance(raw, list):
            sections = {str(k): {} for k in raw}
        with contextlib.suppress(ValidationError, RecursionError):  # DRAKIT_* applied
            settings = DrakitSettings(plugins=sections)
            sections = dict(settings.plugins)
    installed = {e.name for e in installed_plugins()}
    drivers: dict[str, str] = {}  # enabled plugin -> the driver it publishes
    sections_ok: dict[str, PluginSettings] = {}  # validated sections
    defaults: dict[str, str] = {}  # enabled plugin -> its default driver
    classes: dict[str, Any] = {}
    for name, section in sections.items():
        where = f"plugins.{name}"
        if name not in installed:
            known = ", ".join(sorted(installed)) or "none"
            problems.append(
                Problem(
                    _source(file, where),
                    where,
                    f"plugin not installed (installed: {known}); fix the name or install the"
                    " distribution that provides it",
                )
            )
            continue
        [(_, cls)] = load_entry_points(PLUGIN_GROUP, [name])
        classes[name] = cls
        model = cls.settings_model
        try:
            validated = model.model_validate(section or {})
        except ValidationError as e:
            problems += _sourced(
                str(file), validation_errors(e, prefix=where, known=known_keys(model, where))
            )
            continue
        sections_ok[name] = validated
        defaults[name] = str(getattr(cls, "default_driver", ""))
        if validated.strategy:
            problems += _strategy(file, f"{where}.strategy", validated.strategy)
    if settings is not None and settings.publish_strategy:
        problems += _strategy(file, "publish_strategy", settings.publish_strategy)
    drivers.update(plugin_drivers(sections_ok, defaults))
    problems += _prerequisites(file, sections, drivers)
    problems += _never_fit(file, sections_ok)
    if not problems and settings is not None:
        problems += _start_up(file, settings)
    return problems, list(sections)


def _start_up(file: Path, settings: DrakitSettings) -> list[Problem]:
    """What start-up and ``drakit deviceclasses`` refuse once the sections are valid.

    Builds the plugin host as ``drakit node`` and ``drakit deviceclasses`` do (no hardware is
    read: the backends are constructed, not asked to discover) and renders the DeviceClasses
    with ``device_classes`` (a class no configured backend publishes, two backends publishing
    one class).
    """
    try:
        host = PluginHost(settings, NodeInfo(name="validate", sysfs_root="/"))
        classes = host.device_classes()
        drivers = host.driver_names()
    except ConfigInvalid as e:
        return _sourced(str(file), e.errors)
    except DrakitError as e:
        return [Problem(str(file), "", str(e))]
    try:
        render_device_classes(drivers, classes, settings.device_classes)
    except ValueError as e:
        path, sep, message = str(e).partition(": ")
        if sep and path.startswith("device_classes."):
            return [Problem(_source(file, path), path, message)]
        return [Problem(str(file), "device_classes", str(e))]
    return []


def _never_fit(file: Path, sections: Mapping[str, PluginSettings]) -> list[Problem]:
    """A plugin's ``strategy`` that shapes claims its devices can never satisfy.

    A strategy that names the backends it shapes for (``Strategy.backends``, e.g. the CPU
    backend's ``numa-spread``, whose requests ask for a ``cpu`` capacity per NUMA node) is
    refused on any other backend: every claim it shaped there would stay Pending.
    """
    out: list[Problem] = []
    strategies = {e.name: e for e in installed_strategies()}
    for name, section in sections.items():
        chosen = section.strategy
        if not chosen or chosen not in strategies:
            continue
        try:
            [(_, cls)] = load_entry_points(STRATEGY_GROUP, [chosen])
        except DrakitError:
            continue
        backends = tuple(getattr(cls, "backends", ()) or ())
        if backends and name not in backends:
            path = f"plugins.{name}.strategy"
            out.append(
                Problem(
                    _source(file, path),
                    path,
                    f"strategy {chosen!r} shapes claims only {', '.join(backends)}'s devices can "
                    f"satisfy; a claim it shapes for {name}'s devices can never fit. Pick a "
                    "strategy for this backend (packed, distributed, numa-preferred) or remove it",
                )
            )
    return out


def _source(file: Path, path: str) -> str:
    return env_variable(path) or str(file)


def _strategy(file: Path, path: str, name: str) -> list[Problem]:
    names = sorted(e.name for e in installed_strategies())
    if name in names:
        return []
    return [
        Problem(
            _source(file, path),
            path,
            f"strategy {name!r} is not installed (installed: {', '.join(names) or 'none'}); pick"
            " one of them or install the distribution that provides it",
        )
    ]


def _prerequisites(
    file: Path, sections: Mapping[str, Any], drivers: Mapping[str, str]
) -> list[Problem]:
    """Settings named ``*_driver`` must name the driver of an enabled plugin."""
    publishers: dict[str, str] = {}  # installed plugin -> its default driver
    for entry in installed_plugins():
        try:
            [(_, cls)] = load_entry_points(PLUGIN_GROUP, [entry.name])
        except DrakitError:
            continue
        publishers[entry.name] = str(getattr(cls, "default_driver", ""))
    out: list[Problem] = []
    enabled = set(drivers.values())
    for name in drivers:
        section = sections.get(name) or {}
        [(_, cls)] = load_entry_points(PLUGIN_GROUP, [name])
        model = cls.settings_model.model_validate(section)
        for field in type(model).model_fields:
            value = getattr(model, field)
            if not field.endswith("_driver") or not isinstance(value, str) or value in enabled:
                continue
            path = f"plugins.{name}.{field}"
            member = [p for p, d in publishers.items() if d == value]
            hint = (
                f"enable the plugin {member[0]!r} (plugins.{member[0]})"
                if member
                else "enable the plugin that publishes it"
            )
            out.append(
                Problem(
                    _source(file, path),
                    path,
                    f"plugin {name!r} needs driver {value!r}, which no enabled plugin publishes;"
                    f" {hint} or change {field}",
                )
            )
        out += _members(file, name, model, drivers)
    return out


def _members(file: Path, name: str, model: Any, drivers: Mapping[str, str]) -> list[Problem]:
    """Settings named ``*_plugins``: one member enabled, every enabled one under our driver."""
    out: list[Problem] = []
    for field in type(model).model_fields:
        value = getattr(model, field)
        if not field.endswith("_plugins") or not isinstance(value, tuple | list) or not value:
            continue
        members = [str(m) for m in value]
        enabled = [m for m in members if m in drivers and m != name]
        path = f"plugins.{name}.{field}"
        if not enabled:
            out.append(
                Problem(
                    _source(file, path),
                    path,
                    f"none of {', '.join(members)} is enabled; enable one of them "
                    f"(plugins.{members[0]}) or list the enabled backend here",
                )
            )
        for m in enabled:
            if drivers[m] != drivers[name]:
                where = f"plugins.{m}.driver"
                out.append(
                    Problem(
                        _source(file, where),
                        where,
                        f"plugin {m!r} publishes under {drivers[m]!r} but plugins.{name} "
                        f"publishes under {drivers[name]!r} and lists it in {field}; members "
                        f"share counters only inside one driver's pool, so set {where} and "
                        f"plugins.{name}.driver to the same name",
                    )
                )
    return out


# ------------------------------------------------------------------------------ claims


def _configs(doc: Mapping[str, Any]) -> tuple[str, list[Any], set[str] | None]:
    """``(path prefix, config entries, request names or None)`` of a claim, template or class."""
    spec = doc.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    if doc.get("kind") == "DeviceClass":
        config = spec.get("config")
        return "spec.config", config if isinstance(config, list) else [], None
    prefix = "spec"
    if doc.get("kind") == "ResourceClaimTemplate":
        inner = spec.get("spec")
        spec = inner if isinstance(inner, dict) else {}
        prefix = "spec.spec"
    devices = spec.get("devices")
    devices = devices if isinstance(devices, dict) else {}
    requests: set[str] = set()
    for r in devices.get("requests") or []:
        if isinstance(r, dict) and isinstance(r.get("name"), str):
            requests.add(r["name"])
            for sub in r.get("firstAvailable") or []:
                if isinstance(sub, dict) and isinstance(sub.get("name"), str):
                    requests.add(f"{r['name']}/{sub['name']}")
    config = devices.get("config")
    return f"{prefix}.devices.config", config if isinstance(config, list) else [], requests


def _check_entry(
    entry: Any, path: str, requests: set[str] | None, host: PluginHost | None
) -> list[tuple[str, str]]:
    if not isinstance(entry, dict):
        return [(path, "a config entry is a mapping with `opaque` (and optional `requests`)")]
    out: list[tuple[str, str]] = []
    for i, req in enumerate(entry.get("requests") or []):
        if requests is not None and req not in requests:
            known = ", ".join(sorted(requests)) or "none"
            out.append(
                (f"{path}.requests[{i}]", f"no request {req!r} in this claim (requests: {known})")
            )
    opaque = entry.get("opaque")
    if not isinstance(opaque, dict):
        return [*out, (f"{path}.opaque", "missing: drakit reads only opaque configs")]
    return out + _check_opaque(opaque, f"{path}.opaque", host)


def _check_opaque(
    opaque: Mapping[str, Any], path: str, host: PluginHost | None
) -> list[tuple[str, str]]:
    driver: Any = opaque.get("driver")
    params = opaque.get("parameters")
    try:
        driver = _DRIVER.validate_python(driver)
    except ValidationError as e:
        return [(f"{path}.driver", validation_errors(e)[0][1])]
    if not isinstance(params, dict):
        return [(f"{path}.parameters", "must be a JSON object")]
    size = len(json.dumps(params, separators=(",", ":")).encode())
    if size > MAX_OPAQUE_BYTES:
        return [(f"{path}.parameters", f"{size} bytes; the API server allows 10 KiB")]
    if host is None or not host.plugins_for_driver(driver):
        return []  # another vendor's driver: not drakit's to judge
    try:
        host.parse_config(driver, params)
    except ConfigInvalid as e:
        return [(f"{path}.parameters.{p}" if p else f"{path}.parameters", m) for p, m in e.errors]
    return []


def _host(config: Path | None) -> PluginHost | None:
    """A plugin host with every installed backend (or the configured ones), for parse_config."""
    settings = load_settings(config) if config else DrakitSettings()
    if not settings.plugins:
        settings = settings.model_copy(
            update={"plugins": default_sections([e.name for e in installed_plugins()])}
        )
    return PluginHost(
        settings.model_copy(update={"publish_strategy": None}),
        NodeInfo(name="claim-validate", sysfs_root=str(settings.sysfs_root)),
    )


def _documents(file: Path) -> tuple[list[Any], list[Problem]]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [], [Problem(str(file), "", f"cannot read it: {e}")]
    try:
        problem = yaml_shape_problem(text)
        docs = [] if problem else [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return [], [Problem(str(file), "", f"not valid YAML: {getattr(e, 'problem', e)}")]
    if problem:
        return [], [Problem(str(file), "", problem)]
    out: list[Any] = []
    for doc in docs:  # a kubectl List is its items
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out += doc.get("items") or []
        else:
            out.append(doc)
    return out, []


def validate_claim_files(
    files: Sequence[Path], *, config: Path | None = None
) -> tuple[list[Problem], int]:
    """Check every ResourceClaim, ResourceClaimTemplate and DeviceClass in ``files``.

    Args:
        files: YAML files (several documents each, or ``kind: List``).
        config: the drakit configuration whose plugins (and driver names) judge the opaque
            configs; default: every installed backend with its default driver.

    Returns:
        The problems and how many objects were checked.
    """
    problems: list[Problem] = []
    host = _host(config)
    checked = 0
    for file in files:
        docs, bad = _documents(file)
        problems += bad
        for i, doc in enumerate(docs):
            name = doc.get("metadata", {}).get("name") if isinstance(doc, dict) else None
            label = f"{file}[{i}]" + (f" {doc.get('kind')} {name}" if name else "")
            if not isinstance(doc, dict) or doc.get("kind") not in _KINDS:
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                problems.append(
                    Problem(label, "kind", f"{kind!r} is not one of {', '.join(_KINDS)}")
                )
                continue
            if not str(doc.get("apiVersion", "")).startswith("resource.k8s.io/"):
                problems.append(
                    Problem(label, "apiVersion", "must be resource.k8s.io/v1 (or a beta version)")
                )
                continue
            checked += 1
            prefix, entries, requests = _configs(doc)
            for j, entry in enumerate(entries):
                for path, msg in _check_entry(entry, f"{prefix}[{j}]", requests, host):
                    problems.append(Problem(label, path, msg))
    return problems, checked


# -- the commands: drakit config validate, drakit claim validate ---------------------------------


@click.group()
def config() -> None:
    """Work with drakit configuration files."""


@config.command("validate")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def config_validate(file: Path) -> None:
    """Check FILE and DRAKIT_* as start-up would; print each error with its source and the fix."""
    problems, names = validate_config(file)
    if problems:
        for p in problems:
            click.echo(str(p), err=True)
        sys.exit(USER_ERROR)
    click.echo(f"{file}: valid ({', '.join(names)})")


@click.group()
def claim() -> None:
    """Check ResourceClaims, ResourceClaimTemplates and DeviceClasses offline."""


@claim.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
def claim_validate(files: tuple[Path, ...], config_path: Path | None) -> None:
    """Check the opaque configs in FILES through the plugins that own them; exit 2 on errors."""
    problems, checked = validate_claim_files(files, config=config_path)
    if problems:
        for p in problems:
            click.echo(str(p), err=True)
        sys.exit(USER_ERROR)
    click.echo(f"{checked} object(s) valid")
