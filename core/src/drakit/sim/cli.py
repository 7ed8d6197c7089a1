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

from drakit.sim.profiles import (
    build_profile,
    get_profile,
    list_profiles,
    profile_info,
    profile_source,
)

__all__ = ["sim"]


@click.group("sim")
def sim() -> None:
    """Simulated hardware: the profiles `--profile` accepts, and their trees."""


@sim.command("list")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table")
def list_(output: str) -> None:
    """List every simulated-hardware profile with the distribution that provides it.

    A profile whose entry point fails to load is listed with the error instead of its counts.
    """
    rows: list[dict[str, object]] = []
    lines: list[str] = []
    for name in list_profiles():
        try:
            info = profile_info(name)
        except ValueError as e:  # SimSpecError: a broken entry point, a misnamed spec
            source = profile_source(name)
            rows.append({"name": name, "distribution": source, "error": str(e)})
            lines.append(f"{name:24} {source:20} cannot load: {e}")
            continue
        rows.append(dataclasses.asdict(info))
        lines.append(f"{info.name:24} {info.distribution:20} {info}")
    click.echo(json.dumps(rows, indent=2) if output == "json" else "\n".join(lines))


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
