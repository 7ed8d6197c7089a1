"""The CLI kit: what a ``drakit`` command needs, for core's commands and backends' alike.

A backend contributes a click command (or group) under the ``drakit.cli`` entry point group,
the way core declares its own (``core/pyproject.toml``)::

    [project.entry-points."drakit.cli"]
    cpu = "drakit_cpu.cli:cpu"

and builds it from this kit, so that every command behaves the same: a user error is
:class:`UserError` (one line ``drakit: error: ...`` on stderr, exit code 2), hardware comes
from ``--profile`` (a simulated machine, reached through :mod:`drakit.simseam`) or
``--sysfs-root`` (a host root), and structured output is YAML or JSON (:func:`dump`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from drakit.simseam import simulator

__all__ = [
    "PROFILE_HELP",
    "SYSFS_ROOT_HELP",
    "USER_ERROR",
    "UserError",
    "dump",
    "hardware_options",
    "host_root",
    "profile_option",
    "simulated_root",
    "sysfs_root_option",
]

F = TypeVar("F", bound=Callable[..., Any])

USER_ERROR = 2
"""The exit code of a user error (a bad flag, a missing file, an unknown profile)."""

PROFILE_HELP = "Simulated hardware profile (see `drakit sim list`)."
SYSFS_ROOT_HELP = (
    "Host root whose sys/ is read instead of /sys (the sysfs directory itself works too)."
)


class UserError(click.ClickException):
    """An error the user can fix; printed as one line, exit code 2."""

    exit_code = USER_ERROR

    def show(self, file: Any = None) -> None:
        """Print ``drakit: error: <message>`` on stderr."""
        click.echo(f"drakit: error: {self.message}", err=True)


def dump(data: Any, output: str) -> str:
    """``data`` as ``json`` (indented) or, for any other ``output``, as block YAML."""
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return yaml.safe_dump(data, sort_keys=False)


def profile_option(help: str = PROFILE_HELP) -> Callable[[F], F]:
    """``--profile NAME``: a simulated hardware profile."""
    return click.option("--profile", help=help)


def sysfs_root_option(help: str = SYSFS_ROOT_HELP) -> Callable[[F], F]:
    """``--sysfs-root DIR``: an existing host root (see :func:`host_root`)."""
    return click.option(
        "--sysfs-root",
        type=click.Path(path_type=Path, file_okay=False, exists=True),
        help=help,
    )


def hardware_options(f: F) -> F:
    """``--profile``/``--sysfs-root``/``--config``/``--node-name`` shared by several commands."""
    f = click.option("--node-name", help="Node name (default: the profile name or host name).")(f)
    f = click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="drakit YAML configuration (DRAKIT_* variables override it).",
    )(f)
    f = sysfs_root_option()(f)
    return profile_option()(f)


def host_root(path: Path | None) -> Path | None:
    """The host root for ``--sysfs-root``: the sysfs directory itself (``/sys``) works too.

    Raises:
        UserError: neither a host root (holding ``sys/``) nor a sysfs directory.
    """
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


@contextmanager
def simulated_root(profile: str) -> Iterator[Path]:
    """The profile's tree, built in a temporary root for the ``with`` block.

    Raises:
        UserError: no installed profile has that name (the message lists the known ones).
        SimulatorUnavailable: the simulator is not installed.
    """
    with ExitStack() as stack:
        try:
            root = stack.enter_context(simulator().materialize(profile))
        except ValueError as e:  # UnknownProfileError lists the known profiles
            raise UserError(str(e)) from None
        yield root
