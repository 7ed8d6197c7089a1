"""The ``drakit`` command line.

A user error is one clear line on stderr and exit code 2; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml
from pydantic import ValidationError

from drakit.config import (
    DrakitSettings,
    known_keys,
    load_settings,
    read_config_file,
    validation_errors,
)
from drakit.errors import ConfigInvalid, DrakitError
from drakit.explain_cmd import explain_command
from drakit.inventory import build_inventory
from drakit.pluginhost import (
    PLUGIN_GROUP,
    installed_plugins,
    installed_strategies,
    load_entry_points,
)
from drakit.runtime import effective_settings, open_host

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])
USER_ERROR = 2


class UserError(click.ClickException):
    """An error the user can fix; printed as one line, exit code 2."""

    exit_code = USER_ERROR

    def show(self, file: Any = None) -> None:
        click.echo(f"drakit: error: {self.message}", err=True)


def _dump(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return yaml.safe_dump(data, sort_keys=False)


def hardware_options(f: F) -> F:
    """``--profile``/``--sysfs-root``/``--config``/``--node-name`` shared by several commands."""
    f = click.option("--node-name", help="Node name (default: the profile name or host name).")(f)
    f = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="drakit YAML configuration (DRAKIT_* variables override it).",
    )(f)
    f = click.option(
        "--sysfs-root",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        help="Read hardware from this sysfs root instead of /.",
    )(f)
    return click.option("--profile", help="Simulated hardware profile (see `drakit profiles`).")(f)


def _settings(
    config_path: Path | None, profile: str | None, sysfs_root: Path | None, node_name: str | None
) -> DrakitSettings:
    return load_settings(
        config_path,
        overrides={"profile": profile, "sysfs_root": sysfs_root, "node_name": node_name},
    )


class PluginCommands(click.Group):
    """Built-in commands, plus the click commands of the ``drakit.cli`` entry point group.

    A contributed command is imported only when it is looked up; a built-in name wins.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Built-in and contributed command names."""
        contributed = {ep.name for ep in metadata.entry_points(group="drakit.cli")}
        return sorted(set(super().list_commands(ctx)) | contributed)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The built-in command ``name``, else the contributed one (imported now)."""
        found = super().get_command(ctx, name)
        for ep in () if found else metadata.entry_points(group="drakit.cli", name=name):
            try:
                found = ep.load()
            except Exception as e:  # a broken distribution must not break every command
                raise UserError(f"command {name!r} from {ep.value} failed to load: {e!r}") from e
            if not isinstance(found, click.Command):
                raise UserError(f"command {name!r}: {ep.value} is not a click command")
        return found


@click.group(cls=PluginCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Debug logging and tracebacks on errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """drakit: Kubernetes DRA drivers from hook-driven plugins."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
def plugins(config_path: Path | None, output: str) -> None:
    """List installed backends and strategies, and which are enabled."""
    settings = effective_settings(load_settings(config_path))
    enabled = list(settings.plugins)
    strategies_used = {(s or {}).get("strategy") for s in settings.plugins.values()} | {
        settings.publish_strategy
    }
    rows: list[dict[str, str]] = []
    for e in installed_plugins():
        state = f"enabled ({enabled.index(e.name) + 1})" if e.name in enabled else "installed"
        rows.append({"kind": "backend", **vars(e), "state": state})
    for e in installed_strategies():
        state = "selected" if e.name in strategies_used else "available"
        rows.append({"kind": "strategy", **vars(e), "state": state})
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console  # noqa: PLC0415 - rich is only needed for tables
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="drakit plugins")
    for col in ("kind", "name", "distribution", "version", "state"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["kind"], r["name"], r["distribution"], r["version"], r["state"])
    Console().print(table)


@cli.command()
def profiles() -> None:
    """List the simulated hardware profiles shipped with drakit."""
    from drakit.sim import list_profiles, profile_info  # noqa: PLC0415

    for name in list_profiles():
        click.echo(f"{name:24} {profile_info(name)}")


@cli.command()
@hardware_options
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table")
def discover(
    profile: str | None,
    sysfs_root: Path | None,
    config_path: Path | None,
    node_name: str | None,
    output: str,
) -> None:
    """Show the devices the enabled backends discover, with their attributes."""
    settings = _settings(config_path, profile, sysfs_root, node_name)
    with open_host(settings) as host:
        inv = build_inventory(host)
        rows: list[dict[str, Any]] = [
            {
                "driver": key.driver,
                "pool": key.pool,
                "device": key.device,
                "plugin": owner,
                "attributes": {k: v.value for k, v in sorted(dev.attributes.items())},
                "capacity": {k: v.value for k, v in sorted(dev.capacity.items())},
            }
            for key, owner, dev in inv.devices()
        ]
    if output != "table":
        click.echo(_dump(json.loads(json.dumps(rows, default=list)), output))
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"devices on {host.node.name}")
    for col in ("driver", "device", "plugin", "attributes", "capacity"):
        table.add_column(col, overflow="fold")
    for r in rows:
        attrs = ", ".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in r["attributes"].items())
        caps = ", ".join(f"{k}={v}" for k, v in r["capacity"].items())
        table.add_row(r["driver"], r["device"], r["plugin"], attrs, caps)
    Console(width=200).print(table)


@cli.command()
@hardware_options
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def slices(
    profile: str | None,
    sysfs_root: Path | None,
    config_path: Path | None,
    node_name: str | None,
    output: str,
) -> None:
    """Print the ResourceSlices a node would publish (YAML you can `kubectl apply`)."""
    settings = _settings(config_path, profile, sysfs_root, node_name)
    with open_host(settings) as host:
        objs = build_inventory(host).slices()
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2))
    else:
        click.echo(yaml.safe_dump_all(objs, sort_keys=False), nl=False)


@cli.group()
def config() -> None:
    """Work with drakit configuration files."""


@cli.command()
@click.option("--strategy", required=True, help="packed, distributed, numa-preferred, ...")
@click.option("--class", "device_class", required=True, help="DeviceClass name.")
@click.option("--count", type=int, required=True, help="How many devices.")
@click.option("--name", default="devices", show_default=True, help="Request name.")
@click.option(
    "--align",
    default="resource.kubernetes.io/numaNode",
    show_default=True,
    help="Fully qualified attribute to align on.",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
def shape(
    strategy: str,
    device_class: str,
    count: int,
    name: str,
    align: str,
    config_path: Path | None,
) -> None:
    """Print the ResourceClaim `spec.devices` a strategy makes of a simple request."""
    from drakit.models import NodeInfo  # noqa: PLC0415
    from drakit.pluginhost import PluginHost  # noqa: PLC0415
    from drakit.strategy_models import SimpleRequest  # noqa: PLC0415

    try:
        request = SimpleRequest(
            name=name, device_class=device_class, count=count, align_attribute=align
        )
    except ValidationError as e:
        raise ConfigInvalid(validation_errors(e)) from e
    settings = load_settings(config_path).model_copy(update={"plugins": {}})
    host = PluginHost(settings, NodeInfo(name="shape", sysfs_root="/"))
    click.echo(yaml.safe_dump({"devices": host.shape(strategy, request).to_api()}, sort_keys=False))


@config.command("validate")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def config_validate(file: Path) -> None:
    """Check FILE; print every error with its path and the fix, exit 2 if any."""
    errors: list[tuple[str, str]] = []
    sections: dict[str, Any] = {}
    try:
        settings = load_settings(file)
        sections = dict(effective_settings(settings).plugins)
    except ConfigInvalid as e:
        errors.extend(e.errors)
        with contextlib.suppress(ConfigInvalid):  # unreadable or not YAML: already reported
            raw = read_config_file(file).get("plugins")
            if isinstance(raw, dict):
                sections = {str(k): v for k, v in raw.items()}
            elif isinstance(raw, list):
                sections = {str(k): {} for k in raw}
    names = list(sections)
    installed = {e.name for e in installed_plugins()}
    for name in names:
        if name not in installed:
            known = ", ".join(sorted(installed)) or "none"
            errors.append((f"plugins.{name}", f"plugin not installed (installed: {known})"))
            continue
        [(_, cls)] = load_entry_points(PLUGIN_GROUP, [name])
        model = cls.settings_model
        try:
            model.model_validate(sections.get(name) or {})
        except ValidationError as e:
            errors.extend(
                validation_errors(
                    e, prefix=f"plugins.{name}", known=known_keys(model, f"plugins.{name}")
                )
            )
    if errors:
        for path, msg in errors:
            click.echo(f"{file}: {path}: {msg}" if path else f"{file}: {msg}", err=True)
        sys.exit(USER_ERROR)
    click.echo(f"{file}: valid ({', '.join(names)})")


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--node-name", help="This node's name (default: $NODE_NAME, the profile, hostname).")
@click.option(
    "--kubelet-dir", type=click.Path(path_type=Path), help="Holds plugins_registry/, plugins/."
)
@click.option("--cdi-dir", type=click.Path(path_type=Path), help="Where CDI specs are written.")
@click.option("--state-dir", type=click.Path(path_type=Path), help="Checkpoints and locks.")
@click.option("--profile", help="Simulated hardware profile instead of the real sysfs.")
@click.option("--sysfs-root", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--metrics-port", type=int, help="Port for /metrics, /healthz, /readyz (0: any).")
def node(
    config_path: Path | None,
    kubeconfig: Path | None,
    node_name: str | None,
    kubelet_dir: Path | None,
    cdi_dir: Path | None,
    state_dir: Path | None,
    profile: str | None,
    sysfs_root: Path | None,
    metrics_port: int | None,
) -> None:
    """Run the node driver (the DaemonSet entrypoint); flags override the config file."""
    import os  # noqa: PLC0415

    from drakit.kube import KubeClient  # noqa: PLC0415 - only the node talks to a cluster
    from drakit.node import Node  # noqa: PLC0415

    overrides: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "node_name": node_name or os.environ.get("NODE_NAME"),
        "kubelet_dir": kubelet_dir,
        "cdi_dir": cdi_dir,
        "state_dir": state_dir,
        "profile": profile,
        "sysfs_root": sysfs_root,
    }
    settings = load_settings(config_path, overrides=overrides)
    if metrics_port is not None:
        settings = settings.model_copy(
            update={"metrics": settings.metrics.model_copy(update={"port": metrics_port})}
        )
    logging.getLogger().setLevel(settings.log_level)
    kube = KubeClient.from_kubeconfig(settings.kubeconfig)
    Node(settings, kube=kube).run()


@cli.command()
@click.option("--profile", default=None, help="Simulated profile (default: h200-8gpu-8ainic).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="drakit configuration: run its backends instead of the built-in four.",
)
@click.option(
    "--claim",
    "claim_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="ResourceClaim YAML (DeviceClass documents may precede it) instead of the example.",
)
def demo(profile: str | None, config_path: Path | None, claim_path: Path | None) -> None:
    """Run drakit end to end on simulated hardware; needs no cluster."""
    from drakit.demo import run_demo  # noqa: PLC0415 - the demo pulls in the node services

    run_demo(profile, config=config_path, claim=claim_path)


cli.add_command(explain_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning drakit errors into one line and exit code 2."""
    args = sys.argv[1:] if argv is None else argv
    verbose = "-v" in args or "--verbose" in args
    try:
        cli.main(args=args, prog_name="drakit", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(USER_ERROR if e.exit_code == 1 else e.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except DrakitError as e:
        if verbose:
            raise
        click.echo(f"drakit: error: {e}", err=True)
        sys.exit(USER_ERROR)
    except (ValueError, OSError) as e:  # an unknown simulated profile, a missing directory
        if verbose:
            raise
        click.echo(f"drakit: error: {e}", err=True)
        sys.exit(USER_ERROR)
