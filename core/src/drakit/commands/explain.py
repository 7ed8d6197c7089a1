"""The ``drakit explain`` command (also ``kubectl drakit explain``).

Offline it reads ResourceSlices, the claim, DeviceClasses and already allocated claims from
YAML/JSON files; ``drakit explain claim NS/NAME`` reads them from the cluster
(:mod:`drakit.explain.sources` reads both; :mod:`drakit.explain.report` explains).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from drakit.explain.report import Explanation, explain, render
from drakit.explain.sources import Inputs, from_cluster, from_files

__all__ = ["explain_command"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _emit(inputs: Inputs, output: str, exit_zero: bool) -> None:
    """Print the explanation; exit 1 when the claim fits on no node (unless ``exit_zero``)."""
    ex: Explanation = explain(
        inputs.claim, inputs.slices, inputs.classes, inputs.allocated, inputs.nodes
    )
    if output == "json":
        click.echo(json.dumps(ex.model_dump(), indent=2))
    else:
        click.echo(render(ex))
    if not exit_zero and ex.allocated is None and not any(n.fits for n in ex.nodes):
        sys.exit(1)  # SystemExit: click's non-standalone main would swallow its own Exit


_EXIT_ZERO = click.option(
    "--exit-zero",
    is_flag=True,
    help="Exit 0 even when the claim fits on no node (default: exit 1 then).",
)


_OUTPUT = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
_NODE = click.option(
    "--node",
    "node_names",
    multiple=True,
    help="Only these nodes (default: every node with slices).",
)


def _objects(flag: str, dest: str, help_text: str) -> Callable[[_F], _F]:
    """A repeatable option naming files or directories of API objects."""
    return click.option(
        flag, dest, multiple=True, type=click.Path(path_type=Path, exists=True), help=help_text
    )


@click.group("explain", invoke_without_command=True)
@_objects("--slices", "slice_paths", "ResourceSlice files or directories (repeatable).")
@click.option(
    "--claim",
    "claim_path",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The ResourceClaim (or ResourceClaimTemplate).",
)
@_objects("--classes", "class_paths", "DeviceClass files or directories.")
@_objects("--allocated", "allocated_paths", "Claims already allocated (with status.allocation).")
@_objects(
    "--taint-rules",
    "rule_paths",
    "DeviceTaintRule files or directories (those among the --slices files count too).",
)
@_NODE
@_OUTPUT
@_EXIT_ZERO
@click.pass_context
def explain_command(
    ctx: click.Context,
    slice_paths: tuple[Path, ...],
    claim_path: Path | None,
    class_paths: tuple[Path, ...],
    allocated_paths: tuple[Path, ...],
    rule_paths: tuple[Path, ...],
    node_names: tuple[str, ...],
    output: str,
    exit_zero: bool,
) -> None:
    """Per node, the allocation kube-scheduler would make for a claim, or why there is none.

    Offline: --slices and --claim (plus --classes, --allocated, --taint-rules). Against a
    cluster: `drakit explain claim NAMESPACE/NAME`. Exits 1 when the claim fits on no node
    (--exit-zero: 0).
    """
    if ctx.invoked_subcommand is not None:
        return
    if not slice_paths or claim_path is None:
        raise click.UsageError("give --slices and --claim, or use `drakit explain claim NS/NAME`")
    inputs = from_files(
        slice_paths, claim_path, class_paths, allocated_paths, node_names, rule_paths
    )
    _emit(inputs, output, exit_zero)


@explain_command.command("claim")
@click.argument("ref", metavar="NAMESPACE/NAME")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Default: $KUBECONFIG or ~/.kube/config.",
)
@_NODE
@_OUTPUT
@_EXIT_ZERO
def explain_claim(
    ref: str, kubeconfig: Path | None, node_names: tuple[str, ...], output: str, exit_zero: bool
) -> None:
    """Explain a claim in the cluster, on every node that has ResourceSlices.

    The cluster's DeviceTaintRules taint the devices they select. Exits 1 when the claim fits
    on no node (--exit-zero: 0).
    """
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name:
        raise click.BadParameter(f"{ref!r}: write NAMESPACE/NAME", param_hint="NAMESPACE/NAME")
    _emit(from_cluster(namespace, name, kubeconfig, node_names), output, exit_zero)
