"""drakit's configuration: a YAML file, overridden by ``DRAKIT_*`` environment variables.

The file names the plugins to load, in order, as the keys of ``plugins``; each plugin's section
is validated by the plugin's own pydantic model (a subclass of :class:`PluginSettings`).
Unknown keys are errors everywhere. Errors carry a dotted path and the fix::

    plugins.cpu.reserved: "0-3,x" is not a CPU list (example: "0-3,8")

Environment variables use ``__`` between levels: ``DRAKIT_NODE_NAME=node-1``,
``DRAKIT_PLUGINS__CPU__RESERVED=0-1``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from drakit.deviceclasses import DeviceClassSettings
from drakit.errors import ConfigInvalid

__all__ = [
    "DiscoverySettings",
    "DrakitSettings",
    "HealthSettings",
    "MetricsSettings",
    "PluginSettings",
    "known_keys",
    "load_settings",
    "read_config_file",
    "validation_errors",
]

ENV_PREFIX = "DRAKIT_"


class PluginSettings(BaseModel):
    """Base of every plugin's configuration section (``plugins.<name>``).

    Core owns two keys in every section: ``driver`` (the DRA driver name this plugin publishes
    under; plugins sharing a name share one kubelet registration and one slice pool) and
    ``strategy`` (the allocation strategy used for publishing and as the per-claim default).
    A plugin adds its own fields in a subclass; unknown keys are rejected.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: str | None = Field(default=None, description="DRA driver name; default: the plugin's")
    strategy: str | None = Field(default=None, description="Allocation strategy name")


class DiscoverySettings(BaseModel):
    """Re-discovery of hardware."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float = Field(default=60.0, gt=0, description="Seconds between discovery rounds")


class HealthSettings(BaseModel):
    """Device health monitoring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float = Field(default=10.0, gt=0, description="Seconds between health polls")
    resend: float = Field(default=25.0, gt=0, lt=30, description="Full-list resend to kubelet, s")
    taint_unhealthy: bool = Field(default=False, description="Publish taints on unhealthy devices")


class MetricsSettings(BaseModel):
    """The Prometheus and probe endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    address: str = "0.0.0.0"  # noqa: S104 - a DaemonSet pod serves metrics on its pod IP
    port: int = Field(default=8080, ge=0, le=65535, description="0 picks a free port")


class DrakitSettings(BaseSettings):
    """The whole configuration of one drakit process."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    node_name: str | None = Field(default=None, description="This node's name (NODE_NAME)")
    kubelet_dir: Path = Path("/var/lib/kubelet")
    cdi_dir: Path = Path("/var/run/cdi")
    state_dir: Path = Path("/var/lib/drakit")
    sysfs_root: Path = Path("/")
    profile: str | None = Field(default=None, description="Simulated hardware profile name")
    kubeconfig: Path | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    publish_strategy: str | None = Field(
        default=None, description="Default publishing strategy for every plugin"
    )
    plugins: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Plugins to load, in order, each with its section ({} for defaults)",
    )
    discovery: DiscoverySettings = DiscoverySettings()
    device_classes: dict[str, DeviceClassSettings] = Field(
        default_factory=dict,
        description="Per DeviceClass (by name): extended_resource_name (drakit deviceclasses)",
    )
    health: HealthSettings = HealthSettings()
    metrics: MetricsSettings = MetricsSettings()

    known_plugins: ClassVar[tuple[str, ...]] = ()

    @field_validator("plugins", mode="before")
    @classmethod
    def _sections(cls, v: Any) -> Any:
        if isinstance(v, list):  # `plugins: [cpu, amd_ainic]` is shorthand for empty sections
            return {str(name): {} for name in v}
        if isinstance(v, dict):
            return {k: ({} if s is None else s) for k, s in v.items()}
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Environment variables override the file (passed as init values)."""
        return (env_settings, init_settings)


_FIXES: dict[str, str] = {
    "extra_forbidden": "unknown key; remove it or check its spelling",
    "missing": "required; add it",
}


def _format_loc(loc: tuple[int | str, ...], prefix: str) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(item)
    return ".".join(parts)


def validation_errors(
    exc: ValidationError, *, prefix: str = "", known: Mapping[str, list[str]] | None = None
) -> list[tuple[str, str]]:
    """Turn a pydantic ``ValidationError`` into ``(path, message-with-fix)`` pairs.

    Args:
        exc: the error.
        prefix: dotted path of the model inside the whole configuration (``plugins.cpu``).
        known: for ``extra_forbidden`` errors, the known keys per parent path, to list them.
    """
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        path = _format_loc(tuple(err["loc"]), prefix)
        kind = err["type"]
        msg = str(err["msg"])
        if kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif kind in _FIXES:
            msg = _FIXES[kind]
            parent = path.rpartition(".")[0]
            if kind == "extra_forbidden" and known and parent in known:
                msg += f" (known keys: {', '.join(sorted(known[parent]))})"
        else:
            got = err.get("input")
            shown = got if isinstance(got, (int, float, str, bool)) else type(got).__name__
            msg = f"{msg} (got {shown!r})"
        out.append((path, msg))
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a drakit YAML file into a mapping.

    Raises:
        ConfigInvalid: the file is missing, unreadable, not YAML, or not a mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigInvalid([("", f"cannot read {path}: {e.strerror}")], source=str(path)) from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigInvalid(
            [("", f"not valid YAML{where}: {getattr(e, 'problem', e)}")], source=str(path)
        ) from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigInvalid(
            [("", f"the top level must be a mapping of settings, got {type(data).__name__}")],
            source=str(path),
        )
    return data


def known_keys(model: type[BaseModel], prefix: str) -> dict[str, list[str]]:
    """Known keys per dotted path of ``model`` (for 'unknown key' messages)."""
    known = {prefix: list(model.model_fields)}
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            known.update(known_keys(ann, f"{prefix}.{name}" if prefix else name))
    return known


def load_settings(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
) -> DrakitSettings:
    """Load the configuration: file, then ``DRAKIT_*`` environment, then explicit overrides.

    Args:
        path: the YAML file, if any.
        overrides: values that win over both (command-line flags).

    Raises:
        ConfigInvalid: with every error, each naming its path and the fix.
    """
    data = read_config_file(path) if path else {}
    source = str(path) if path else "configuration"
    try:
        settings = DrakitSettings(**data)
    except ValidationError as e:
        raise ConfigInvalid(
            validation_errors(e, known=known_keys(DrakitSettings, "")), source=source
        ) from e
    # Flags win over the environment: validate each one against its field and apply it last.
    checked: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        field = DrakitSettings.model_fields.get(key)
        if field is None:
            errors.append((key, "unknown setting"))
            continue
        try:
            checked[key] = TypeAdapter[Any](cast(Any, field.annotation)).validate_python(value)
        except ValidationError as e:
            errors.extend(validation_errors(e, prefix=key))
    if errors:
        raise ConfigInvalid(errors, source="command line")
    return settings.model_copy(update=checked) if checked else settings
