"""The ``drakit`` command line.

A user error is one clear line on stderr and exit code 2; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import ssl
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
    load_settings,
    validation_errors,
)
from drakit.errors import ConfigInvalid, DrakitError
from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import (
    installed_plugins,
    installed_strategies,
)
from drakit.host.startup import effective_settings, open_host

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


def _cells(*values: str) -> list[Any]:
    """Table cells as plain text: ``0000:cd:00.0`` or ``[bold]`` print as they are."""
    from rich.text import Text  # noqa: PLC0415 - rich is only needed for tables

    return [Text(v) for v in values]


def _sysfs_root(path: Path | None) -> Path | None:
    """The host root for ``--sysfs-root``: the sysfs directory itself (``/sys``) works too."""
    if path is None or (path / "sys").is_dir():
        return path
    if (path / "devices" / "system").is_dir():
        if path.name == "sys":
            return path.parent
        raise UserError(
            f"--sysfs-root {path}: this is a sysfs directory, but drakit reads <root>/sys and"
            f" <root>/proc; pass the directory that holds it as sys/"
        )
    raise UserError(f"--sysfs-root {path}: no sys/ directory in it; pass the host root (/)")


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
        help="Host root whose sys/ is read instead of /sys (the sysfs directory itself works too).",
    )(f)
    return click.option("--profile", help="Simulated hardware profile (see `drakit sim list`).")(f)


def _settings(
    config_path: Path | None, profile: str | None, sysfs_root: Path | None, node_name: str | None
) -> DrakitSettings:
    return load_settings(
        config_path,
        overrides={
            "profile": profile,
            "sysfs_root": _sysfs_root(sysfs_root),
            "node_name": node_name,
        },
    )


_LAZY_COMMANDS = {"explain": ("drakit.commands.explain", "explain_command")}
"""Built-in commands imported only when run: ``explain`` brings the whole allocator (the
``resource.k8s.io`` models and CEL), which ``drakit node`` never uses."""


class PluginCommands(click.Group):
    """Built-in commands, plus the click commands of the ``drakit.cli`` entry point group.

    A contributed command is imported only when it is looked up; a built-in name wins.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Built-in and contributed command names."""
        contributed = {ep.name for ep in metadata.entry_points(group="drakit.cli")}
        return sorted(set(super().list_commands(ctx)) | set(_LAZY_COMMANDS) | contributed)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The built-in command ``name``, else the contributed one (imported now)."""
        found = super().get_command(ctx, name)
        if found is None and name in _LAZY_COMMANDS:
            module, attr = _LAZY_COMMANDS[name]
            found = getattr(importlib.import_module(module), attr)
            self.add_command(found, name)
        for ep in () if found else metadata.entry_points(group="drakit.cli", name=name):
            try:
                found = ep.load()
            except Exception as e:  # a broken distribution must not break every command
                raise UserError(f"command {name!r} from {ep.value} failed to load: {e!r}") from e
            if not isinstance(found, click.Command):
                raise UserError(f"command {name!r}: {ep.value} is not a click command")
        return found


@click.group(cls=PluginCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="drakit", prog_name="drakit")
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
        table.add_row(*_cells(r["kind"], r["name"], r["distribution"], r["version"], r["state"]))
    Console().print(table)


@cli.command()
@click.pass_context
def profiles(ctx: click.Context) -> None:
    """List the simulated hardware profiles (the same as `drakit sim list`)."""
    sim = cli.get_command(ctx, "sim")  # contributed by drakit.sim through drakit.cli
    if not isinstance(sim, click.Group) or "list" not in sim.commands:
        raise UserError("the simulator's `drakit sim` command is not installed")
    ctx.invoke(sim.commands["list"])


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
        table.add_row(*_cells(r["driver"], r["device"], r["plugin"], attrs, caps))
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


@cli.command()
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


@config.command("validate")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
def config_validate(file: Path) -> None:
    """Check FILE and DRAKIT_* as start-up would; print each error with its source and the fix."""
    from drakit.commands.validate import validate_config  # noqa: PLC0415

    problems, names = validate_config(file)
    if problems:
        for p in problems:
            click.echo(str(p), err=True)
        sys.exit(USER_ERROR)
    click.echo(f"{file}: valid ({', '.join(names)})")


@cli.group("plugin")
def plugin_group() -> None:
    """Create backend distributions."""


@plugin_group.command("new")
@click.argument("name")
@click.option(
    "--dir",
    "target",
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory to create (default: ./drakit-NAME); it must not exist or be empty.",
)
@click.option("--driver", help="DRA driver name (default: NAME.example.com, with '-' for '_').")
def plugin_new(name: str, target: Path | None, driver: str | None) -> None:
    """Scaffold a backend distribution for plugin NAME (e.g. acme_fpga), ready to test."""
    from drakit.scaffold import ScaffoldError, new_plugin  # noqa: PLC0415

    try:
        where = new_plugin(name, target, driver=driver)
    except ScaffoldError as e:
        raise UserError(str(e)) from e
    click.echo(f"created {where}; next: cd {where} and follow its README.md")


@cli.group()
def claim() -> None:
    """Check ResourceClaims, ResourceClaimTemplates and DeviceClasses offline."""


@claim.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
def claim_validate(files: tuple[Path, ...], config_path: Path | None) -> None:
    """Check the opaque configs in FILES through the plugins that own them; exit 2 on errors."""
    from drakit.commands.validate import validate_claim_files  # noqa: PLC0415

    problems, checked = validate_claim_files(files, config=config_path)
    if problems:
        for p in problems:
            click.echo(str(p), err=True)
        sys.exit(USER_ERROR)
    click.echo(f"{checked} object(s) valid")


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
@click.option(
    "--sysfs-root",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Host root whose sys/ is read instead of /sys (the sysfs directory itself works too).",
)
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
    from drakit.node.daemon import Node  # noqa: PLC0415

    overrides: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "node_name": node_name or os.environ.get("NODE_NAME"),
        "kubelet_dir": kubelet_dir,
        "cdi_dir": cdi_dir,
        "state_dir": state_dir,
        "profile": profile,
        "sysfs_root": _sysfs_root(sysfs_root),
    }
    settings = load_settings(config_path, overrides=overrides)
    if metrics_port is not None:
        settings = settings.model_copy(
            update={"metrics": settings.metrics.model_copy(update={"port": metrics_port})}
        )
    logging.getLogger().setLevel(settings.log_level)
    _lean_log_records()
    kube = KubeClient.from_kubeconfig(settings.kubeconfig)
    Node(settings, kube=kube).run()


def _lean_log_records() -> None:
    """Stop collecting what the log format never shows: caller, thread, process.

    The logging HOWTO's "Optimization" switches, set by the node process only (it owns its
    logging; a prepare logs one INFO line per claim). Never set where drakit is a library.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


@cli.command()
@click.option(
    "--cert-file", required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.option(
    "--key-file", required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.option("--port", type=int, default=8443, show_default=True, help="HTTPS port (0: any).")
@click.option("--address", default="0.0.0.0", show_default=True, help="Listen address.")  # noqa: S104
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--kueue", is_flag=True, help="Emit exactly requests only (Kueue-managed pods).")
@click.option("--pair-class", default="gpu-nic-pair", show_default=True, help="Pairs' class.")
def webhook(
    cert_file: Path,
    key_file: Path,
    port: int,
    address: str,
    config_path: Path | None,
    kubeconfig: Path | None,
    kueue: bool,
    pair_class: str,
) -> None:
    """Serve the admission webhook over HTTPS: /mutate-pods, /validate-claims, /healthz."""
    from drakit.admission import WebhookOptions  # noqa: PLC0415
    from drakit.host.mutators import load_mutators  # noqa: PLC0415
    from drakit.host.pluginhost import PluginHost  # noqa: PLC0415
    from drakit.kube import KubeClient  # noqa: PLC0415
    from drakit.models import NodeInfo  # noqa: PLC0415
    from drakit.webhook import WebhookServer  # noqa: PLC0415
    from drakit.webhook.admission import Admission  # noqa: PLC0415

    settings = effective_settings(load_settings(config_path, overrides={"kubeconfig": kubeconfig}))
    logging.getLogger().setLevel(settings.log_level)
    host = PluginHost(settings, NodeInfo(name="webhook", sysfs_root="/"))
    options = WebhookOptions(kueue=kueue, flags={"pair_class": pair_class})
    mutators = load_mutators(options, host.driver_names())
    engine = Admission(host, KubeClient.from_kubeconfig(settings.kubeconfig), mutators)
    try:
        server = WebhookServer(engine, cert_file, key_file, address=address, port=port)
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot serve on {address}:{port} with {cert_file}: {e}") from e
    click.echo(f"drakit webhook: serving https://{address}:{server.port}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


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
    from drakit.commands.demo import run_demo  # noqa: PLC0415 - the demo pulls in the node services

    run_demo(profile, config=config_path, claim=claim_path)


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
