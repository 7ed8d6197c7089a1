"""The ``drakit`` command line: one group, every command an entry point of ``drakit.cli``.

Core declares its own commands in that group (``core/pyproject.toml``) exactly as a backend
does (``drakit cpu``) or the simulator (``drakit sim``): each is imported only when it is looked
up, so ``drakit node`` never imports what ``drakit explain`` needs. The commands live one module
per command group in :mod:`drakit.commands` and are built from :mod:`drakit.clikit`.

A user error is one clear line on stderr and exit code 2; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import logging
import sys
from importlib import metadata

import click

from drakit.clikit import USER_ERROR, UserError
from drakit.errors import DrakitError

__all__ = ["CLI_GROUP", "cli", "main"]

CLI_GROUP = "drakit.cli"
"""Commands: ``name = "pkg.module:command"``, a click command or group."""
CORE_DISTRIBUTION = "drakit"


def _entry_point(name: str) -> metadata.EntryPoint | None:
    """The ``drakit.cli`` entry point ``name``; core's own wins over a contributed one."""
    found = sorted(
        metadata.entry_points(group=CLI_GROUP, name=name),
        key=lambda ep: (ep.dist.metadata["Name"] if ep.dist else "") != CORE_DISTRIBUTION,
    )
    return found[0] if found else None


class PluginCommands(click.Group):
    """The commands of the ``drakit.cli`` entry point group, core's and contributed ones.

    A command is imported only when it is looked up; core's wins a name both declare.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name."""
        return sorted({ep.name for ep in metadata.entry_points(group=CLI_GROUP)})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command ``name`` (imported now), or ``None``."""
        ep = _entry_point(name)
        if ep is None:
            return None
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
