"""drakit's configuration: a YAML file, overridden by ``DRAKIT_*`` environment variables.

The file names the plugins to load, in order, as the keys of ``plugins``; each plugin's section
is validated by the plugin's own pydantic model (a subclass of
:class:`drakit.config.PluginSettings`). Unknown keys are errors everywhere. Errors carry a
dotted path and the fix::

    plugins.cpu.reserved: "0-3,x" is not a CPU list (example: "0-3,8")

Environment variables use ``__`` between levels: ``DRAKIT_NODE_NAME=node-1``,
``DRAKIT_PLUGINS__CPU__RESERVED=0-1``. An error in a value that came from a variable names the
variable, not the file.

Everything is bounded, so no input can make loading slow, deep or huge: every number has a
range, every name and path a length, the file a size (:data:`MAX_FILE_BYTES`) and a nesting
depth (:data:`MAX_DEPTH`), CPU lists a highest CPU id (:data:`drakit.cpuset.MAX_CPUS`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, cast

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from drakit.config import DNS_SUBDOMAIN, MAX_NAME, PluginSettings, validation_errors
from drakit.deviceclasses import DeviceClassSettings
from drakit.errors import ConfigInvalid

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "DiscoverySettings",
    "DrakitSettings",
    "HealthSettings",
    "MetricsSettings",
    "NriSettings",
    "env_variable",
    "known_keys",
    "load_settings",
    "plugin_drivers",
    "read_config_file",
    "yaml_shape_problem",
]

ENV_PREFIX = "DRAKIT_"
MAX_FILE_BYTES = 1 << 20
"""A configuration file is at most 1 MiB."""
MAX_DEPTH = 32
"""Mappings and lists nest at most this deep (the deepest real setting is 4 levels down)."""
MAX_YAML_NODES = 1_000_000
"""A YAML document expands to at most this many values, aliases included (a bound on work)."""
MAX_PLUGINS = 64
MAX_PATH = 4096


def _node_name(value: str) -> str:
    if len(value.encode()) > MAX_NAME or not DNS_SUBDOMAIN.match(value):
        raise ValueError(
            f"{value[:80]!r} is not a Kubernetes node name: use a lower-case DNS subdomain of at"
            " most 253 characters (what `kubectl get nodes` shows)"
        )
    return value


def _path(value: Path) -> Path:
    text = str(value)
    if "\0" in text or len(text.encode()) > MAX_PATH:
        raise ValueError(f"not a usable path (at most {MAX_PATH} bytes, no NUL characters)")
    return value


def _absolute(value: Path) -> Path:
    if not value.is_absolute():
        raise ValueError(f"{str(value)[:80]!r} is not an absolute path; write it from / on")
    return value


_NodeName = Annotated[str, AfterValidator(_node_name)]
_Path = Annotated[Path, AfterValidator(_path)]
_AbsPath = Annotated[Path, AfterValidator(_path), AfterValidator(_absolute)]
_Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


def plugin_drivers(
    sections: Mapping[str, PluginSettings], defaults: Mapping[str, str]
) -> dict[str, str]:
    """The DRA driver of every enabled plugin.

    Its section's ``driver``, else the driver of the plugin that composes it
    (:meth:`PluginSettings.member_plugins`), else its default. A member that sets ``driver``
    itself keeps it (the composing plugin may then refuse it).
    """
    out = {name: sec.driver or defaults[name] for name, sec in sections.items()}
    for name, sec in sections.items():
        for member in sec.member_plugins():
            if member != name and member in sections and sections[member].driver is None:
                out[member] = out[name]
    return out


class DiscoverySettings(BaseModel):
    """Re-discovery of hardware."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float = Field(
        default=60.0,
        ge=1,
        le=86400,
        allow_inf_nan=False,
        description="Seconds between discovery rounds (1 to 86400)",
    )


class HealthSettings(BaseModel):
    """Device health monitoring."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: float = Field(
        default=10.0,
        ge=0.1,
        le=3600,
        allow_inf_nan=False,
        description="Seconds between health polls (0.1 to 3600)",
    )
    resend: float = Field(
        default=25.0,
        ge=1,
        lt=30,
        allow_inf_nan=False,
        description="Full-list resend to kubelet, s (1 to under 30)",
    )
    taint_unhealthy: bool = Field(default=False, description="Publish taints on unhealthy devices")


class MetricsSettings(BaseModel):
    """The Prometheus and probe endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    address: str = Field(
        default="0.0.0.0",  # noqa: S104 - a DaemonSet pod serves metrics on its pod IP
        min_length=1,
        max_length=MAX_NAME,
    )
    port: int = Field(default=8080, ge=0, le=65535, description="0 picks a free port")


class NriSettings(BaseModel):
    """``nri``: enforcement through the container runtime's NRI socket (``docs/nri.md``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=False,
        description="Run drakit's NRI plugin: pin CPU claims, keep other containers off them",
    )
    socket: _Path = Field(default=Path("/var/run/nri/nri.sock"), description="The NRI socket")
    plugin_name: str = Field(
        default="drakit", pattern=r"^[a-zA-Z0-9_.+-]+$", description="Name registered with NRI"
    )
    plugin_index: str = Field(
        default="50",
        pattern=r"^[0-9]{2}$",
        description="Two-digit NRI index; the runtime calls plugins in ascending order",
    )
    fail_closed: bool = Field(
        default=True,
        description=(
            "A container using a drakit claim does not start unless drakit's NRI plugin "
            "processed it (each claim's CDI spec carries a mount only the plugin removes)"
        ),
    )
    memory_nodes: bool = Field(
        default=False, description="Also set cpuset.mems to the NUMA nodes of the CPUs"
    )


class TopologyLabelSettings(BaseModel):
    """The Node labels under ``topology.drakit.io/`` that ``drakit node`` keeps (multi-node.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True, description="Keep the backends' topology.drakit.io/ labels on the Node"
    )
    remove_on_exit: bool = Field(
        default=False,
        description="Remove them when drakit node stops (default: kept, like the slices)",
    )


class DrakitSettings(BaseSettings):
    """The whole configuration of one drakit process."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    node_name: _NodeName | None = Field(default=None, description="This node's name (NODE_NAME)")
    kubelet_dir: _Path = Path("/var/lib/kubelet")
    cdi_dir: _Path = Path("/var/run/cdi")
    state_dir: _Path = Path("/var/lib/drakit")
    sysfs_root: _Path = Path("/")
    device_root: _AbsPath | None = Field(
        default=None,
        description=(
            "Host directory whose dev/ holds the device nodes CDI specs name as hostPath "
            "(NVIDIA's devRoot, e.g. /run/nvidia/driver); default /, which for simulated "
            "hardware means the simulated root"
        ),
    )
    device_root_mount: _AbsPath | None = Field(
        default=None,
        description=(
            "Where this process sees device_root, to check the host's nodes at prepare (the "
            "chart mounts <device_root>/dev under /var/run/drakit/device-root); default: "
            "device_root itself; not used for a simulated root"
        ),
    )
    device_metadata: bool = Field(
        default=False,
        description=(
            "Write KEP-5304 device metadata files (each prepared device's attributes, mounted "
            "into the container under /var/run/kubernetes.io/dra-device-attributes); off by "
            "default, as in the Go kubelet-plugin helper"
        ),
    )
    profile: _Name | None = Field(default=None, description="Simulated hardware profile name")
    kubeconfig: _Path | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    publish_strategy: _Name | None = Field(
        default=None, description="Default publishing strategy for every plugin"
    )
    plugins: dict[Annotated[str, Field(min_length=1, max_length=63)], dict[str, Any]] = Field(
        default_factory=dict,
        max_length=MAX_PLUGINS,
        description="Plugins to load, in order, each with its section ({} for defaults)",
    )
    discovery: DiscoverySettings = DiscoverySettings()
    device_classes: dict[str, DeviceClassSettings] = Field(
        default_factory=dict,
        description="Per DeviceClass (by name): extended_resource_name (drakit deviceclasses)",
    )
    health: HealthSettings = HealthSettings()
    metrics: MetricsSettings = MetricsSettings()
    topology_labels: TopologyLabelSettings = TopologyLabelSettings()
    nri: NriSettings = NriSettings()

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


def yaml_shape_problem(
    text: str, *, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH
) -> str | None:
    """Why the YAML text is too big, too deep or expands too far to load (``None``: it is fine).

    Reads the event stream (PyYAML's parser is not recursive and does not expand aliases), so
    a deeply nested document is refused before the recursive composer sees it, and so is a
    document whose aliases would expand to more than :data:`MAX_YAML_NODES` nodes (a "billion
    laughs" of a few hundred bytes): each anchor's size is counted once, each alias adds the
    size of what it names. The message names the line, never the expanded values.
    """
    if len(text.encode("utf-8")) > max_bytes:
        return f"the file is over {max_bytes // 1024} KiB; drakit configuration is far smaller"
    sizes: dict[str, int] = {}
    frames: list[tuple[str | None, int]] = [(None, 0)]  # (anchor, nodes so far) per collection
    aliased = 0  # values that aliases added
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            if len(frames) > max_depth:
                return (
                    f"nested more than {max_depth} levels deep{_at(event)}; no setting is that deep"
                )
            frames.append((event.anchor, 1))
            continue
        if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            anchor, n = frames.pop()
            if anchor is not None:
                sizes[anchor] = n
            added = n
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                sizes[event.anchor] = 1
            added = 1
        elif isinstance(event, yaml.AliasEvent):
            added = sizes.get(str(event.anchor), 1)
            aliased += added
        else:
            continue
        anchor, n = frames[-1]
        frames[-1] = (anchor, n + added)
        if frames[-1][1] > MAX_YAML_NODES or frames[0][1] > MAX_YAML_NODES:
            if aliased * 2 > MAX_YAML_NODES:  # the aliases made it that large
                return (
                    f"its aliases (*name) expand to more than {MAX_YAML_NODES} values"
                    f"{_at(event)}; write the values out or use fewer aliases"
                )
            return (
                f"it holds more than {MAX_YAML_NODES} values{_at(event)}, more than a YAML file "
                "is read with; write a cluster's objects as JSON (a .json file, e.g. kubectl "
                "get ... -o json), which is read without this bound"
            )
    return None


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def read_config_file(path: Path) -> dict[str, Any]:
    """Read a drakit YAML file into a mapping.

    Raises:
        ConfigInvalid: the file is missing, unreadable, not YAML, too big or too deep, or not a
            mapping.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigInvalid([("", f"not UTF-8 text: {e.reason}")], source=str(path)) from e
    except OSError as e:
        raise ConfigInvalid([("", f"cannot read {path}: {e.strerror}")], source=str(path)) from e
    try:
        problem = yaml_shape_problem(text)
        data = None if problem else yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigInvalid(
            [("", f"not valid YAML{where}: {getattr(e, 'problem', e)}")], source=str(path)
        ) from e
    if problem:
        raise ConfigInvalid([("", problem)], source=str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigInvalid(
            [("", f"the top level must be a mapping of settings, got {type(data).__name__}")],
            source=str(path),
        )
    return data


def env_variable(path: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The ``DRAKIT_*`` variable that set the setting at dotted ``path``, if one did.

    ``plugins.cpu.reserved`` is set by ``DRAKIT_PLUGINS__CPU__RESERVED`` or, as JSON, by
    ``DRAKIT_PLUGINS__CPU`` or ``DRAKIT_PLUGINS`` (names are case-insensitive).
    """
    env = {k.upper(): k for k in (os.environ if environ is None else environ)}
    parts = [p.upper() for p in re.split(r"[.\[]", path) if p and not p.endswith("]")]
    for i in range(len(parts), 0, -1):
        name = ENV_PREFIX + "__".join(parts[:i])
        if name in env:
            return env[name]
    return None


def _attribute(errors: list[tuple[str, str]], file: str) -> ConfigInvalid:
    """One ConfigInvalid whose errors say which came from a variable (and which from ``file``)."""
    out: list[tuple[str, str]] = []
    from_env = 0
    for path, msg in errors:
        var = env_variable(path) if path else None
        if var:
            from_env += 1
        out.append((path, f"{msg} (set by {var}; fix or unset it)" if var else msg))
    if from_env == len(out):
        source = "environment"
    elif from_env == 0:
        source = file
    else:
        source = f"{file} and environment"
    return ConfigInvalid(out, source=source)


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
        raise _attribute(validation_errors(e, known=known_keys(DrakitSettings, "")), source) from e
    except RecursionError as e:  # a DRAKIT_* variable holding deeply nested JSON
        raise _attribute(
            [("", f"a DRAKIT_* value is nested deeper than Python can read; at most {MAX_DEPTH}")],
            source,
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
