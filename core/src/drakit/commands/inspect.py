"""Looking before running: what is installed, what a node would discover and publish.

``drakit plugins``, ``profiles``, ``discover``, ``slices``, ``shape`` and ``deviceclasses``,
all offline (no cluster).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from drakit.clikit import UserError, dump, hardware_options, host_root
from drakit.config import validation_errors
from drakit.errors import ConfigInvalid
from drakit.host.inventory import build_inventory
from drakit.host.loader import installed_plugins, installed_strategies
from drakit.host.settings import DrakitSettings, load_settings
from drakit.host.startup import effective_settings, open_host

__all__ = ["deviceclasses", "discover", "plugins", "profiles", "shape", "slices"]


def _cells(*values: str) -> list[Any]:
    """Table cells as plain text: ``0000:cd:00.0`` or ``[bold]`` print as they are."""
    from rich.text import Text  # noqa: PLC0415 - rich is only needed for tables

    return [Text(v) for v in values]


def _hardware_settings(f: Callable[..., None]) -> Callable[..., None]:
    """:func:`~drakit.clikit.hardware_options`, handed to the command as the settings they name."""

    @hardware_options
    @functools.wraps(f)
    def command(
        profile: str | None,
        sysfs_root: Path | None,
        config_path: Path | None,
        node_name: str | None,
        **options: Any,
    ) -> None:
        overrides = {
            "profile": profile,
            "sysfs_root": host_root(sysfs_root),
            "node_name": node_name,
        }
        f(load_settings(config_path, overrides=overrides), **options)

    return command


@click.command()
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
        table.add_row(*_cells(r["kind"], r["name"], r["distribution"], r["version"], r["state"]))
    Console().print(table)


@click.command()
@click.pass_context
def profiles(ctx: click.Context) -> None:
    """List the simulated hardware profiles (the same as `drakit sim list`)."""
    root = ctx.find_root()
    group = root.command
    # contributed by drakit.sim through drakit.cli
    sim = group.get_command(root, "sim") if isinstance(group, click.Group) else None
    if not isinstance(sim, click.Group) or "list" not in sim.commands:
        raise UserError("the simulator's `drakit sim` command is not installed")
    ctx.invoke(sim.commands["list"])


@click.command()
@_hardware_settings
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table")
def discover(settings: DrakitSettings, output: str) -> None:
    """Show the devices the enabled backends discover, with their attributes."""
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
        click.echo(dump(json.loads(json.dumps(rows, default=list)), output))
        return
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"devices on {host.node.name}")
    for col in ("driver", "device", "plugin", "attributes", "capacity"):
        table.add_column(col, overflow="fold")
    for r in rows:
        attrs = ", ".join(f"{k.rsplit('/', 1)[-1]}={v}" for k, v in r["attributes"].items())
        caps = ", ".join(f"{k}={v}" for k, v in r["capacity"].items())
        table.add_row(*_cells(r["driver"], r["device"], r["plugin"], attrs, caps))
    Console(width=200).print(table)


@click.command()
@_hardware_settings
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def slices(settings: DrakitSettings, output: str) -> None:
    """Print the ResourceSlices a node would publish (YAML you can `kubectl apply`)."""
    with open_host(settings) as host:
        objs = build_inventory(host).slices()
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2))
    else:
        click.echo(yaml.safe_dump_all(objs, sort_keys=False), nl=False)


@click.command()
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
@click.option(
    "--required",
    is_flag=True,
    help="Make the topology constraint hard (the claim waits until a node meets it).",
)
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
def shape(
    strategy: str,
    device_class: str,
    count: int,
    name: str,
    align: str,
    required: bool,
    config_path: Path | None,
) -> None:
    """Print the ResourceClaim `spec.devices` a strategy makes of a simple request.

    The shipped strategies prefer their alignment and fall back to any placement
    (`firstAvailable`); `--required` makes the alignment a hard constraint.
    """
    from drakit.host.pluginhost import PluginHost  # noqa: PLC0415
    from drakit.models import NodeInfo  # noqa: PLC0415
    from drakit.strategy_models import SimpleRequest  # noqa: PLC0415

    try:
        request = SimpleRequest(
            name=name,
            device_class=device_class,
            count=count,
            align_attribute=align,
            required=required,
        )
    except ValidationError as e:
        raise ConfigInvalid(validation_errors(e)) from e
    settings = load_settings(config_path).model_copy(update={"plugins": {}})
    host = PluginHost(settings, NodeInfo(name="shape", sysfs_root="/"))
    click.echo(yaml.safe_dump({"devices": host.shape(strategy, request).to_api()}, sort_keys=False))


@click.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml")
def deviceclasses(config_path: Path | None, output: str) -> None:
    """Print the DeviceClasses of the configured backends (YAML you can `kubectl apply`)."""
    from drakit.deviceclasses import render_device_classes  # noqa: PLC0415
    from drakit.host.pluginhost import PluginHost  # noqa: PLC0415
    from drakit.models import NodeInfo  # noqa: PLC0415

    settings = effective_settings(load_settings(config_path))
    host = PluginHost(settings, NodeInfo(name="deviceclasses", sysfs_root="/"))
    try:
        objs = render_device_classes(
            host.driver_names(), host.device_classes(), settings.device_classes
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2))
    else:
        click.echo(yaml.safe_dump_all(objs, sort_keys=False), nl=False)
