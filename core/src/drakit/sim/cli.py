"""``drakit sim``: the simulated-hardware profiles (contributed through ``drakit.cli``).

``drakit sim list`` shows every profile with the distribution that provides it (``drakit`` for
core's CPU-only ones, ``drakit-sim-profiles`` for the reference GPU/NIC machines, a vendor's
package for theirs); ``drakit sim build --profile NAME DIR`` writes a profile's tree to a
directory, for ``--sysfs-root`` runs or for looking at what discovery reads.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from drakit.sim.profiles import build_profile, get_profile, list_profiles, profile_info

__all__ = ["sim"]


@click.group("sim")
def sim() -> None:
    """Simulated hardware: the profiles `--profile` accepts, and their trees."""


@sim.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
def list_(output: str) -> None:
    """List every simulated-hardware profile with the distribution that provides it."""
    infos = [profile_info(name) for name in list_profiles()]
    if output == "json":
        click.echo(json.dumps([dataclasses.asdict(i) for i in infos], indent=2))
        return
    for info in infos:
        click.echo(f"{info.name:24} {info.distribution:20} {info}")


@sim.command("build")
@click.option("--profile", required=True, help="The profile to build (see `drakit sim list`).")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
def build(profile: str, directory: Path) -> None:
    """Write a profile's sysfs/procfs tree into DIRECTORY (empty or missing)."""
    get_profile(profile)  # an unknown name fails before anything is created
    try:
        build_profile(profile, directory)
    except FileExistsError as e:
        raise click.UsageError(f"{e}; give an empty or missing directory") from None
    click.echo(f"built {profile} under {directory} (use --sysfs-root {directory})")
