"""``drakit plugin``: create backend distributions."""

from __future__ import annotations

from pathlib import Path

import click

from drakit.clikit import UserError

__all__ = ["plugin_group"]


@click.group("plugin")
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
@click.option(
    "--drakit-source",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="A drakit checkout's core/ directory for [tool.uv.sources] (default: the checkout this"
    " drakit is installed from, editable; none when it came from a package index).",
)
def plugin_new(
    name: str, target: Path | None, driver: str | None, drakit_source: Path | None
) -> None:
    """Scaffold a backend distribution for plugin NAME (e.g. acme_fpga), ready to test."""
    from drakit.scaffold import ScaffoldError, local_drakit, new_plugin  # noqa: PLC0415

    try:
        where = new_plugin(
            name, target, driver=driver, drakit_source=drakit_source or local_drakit()
        )
    except ScaffoldError as e:
        raise UserError(str(e)) from e
    click.echo(f"created {where}; next: cd {where} and follow its README.md")
