"""The ``drakit explain`` command (also ``kubectl drakit explain``).

Offline it reads ResourceSlices, the claim, DeviceClasses and already allocated claims from
YAML/JSON files; ``drakit explain claim NS/NAME`` reads them from the cluster
(:mod:`drakit.explain.sources` reads both; :mod:`drakit.explain.report` explains).
``drakit explain job NS/TEMPLATE --pods N`` says which domains of a node label can hold a job
(:mod:`drakit.explain.job`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from drakit.allocator import Node
from drakit.explain.job import explain_job, render_job
from drakit.explain.report import Explanation, explain, render
from drakit.explain.sources import Inputs, from_cluster, from_files, read_nodes

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


@explain_command.command("job")
@click.argument("ref", metavar="[NAMESPACE/TEMPLATE]", required=False)
@click.option("--pods", type=click.IntRange(min=1), required=True, help="Pods in the job.")
@click.option(
    "--topology-key",
    default="topology.drakit.io/fabric",
    show_default=True,
    help="The node label whose values are the domains (a PodGroup's topology key, a Kueue level).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Default: $KUBECONFIG or ~/.kube/config.",
)
@_objects("--slices", "slice_paths", "Offline: ResourceSlice files or directories.")
@click.option(
    "--claim",
    "claim_path",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="Offline: the ResourceClaimTemplate (or ResourceClaim) every pod's claim is made from.",
)
@_objects("--nodes", "node_paths", "Offline: Node files or directories (their labels count).")
@_objects("--classes", "class_paths", "Offline: DeviceClass files or directories.")
@_objects("--allocated", "allocated_paths", "Offline: claims already allocated.")
@_OUTPUT
@_EXIT_ZERO
def explain_job_command(
    ref: str | None,
    pods: int,
    topology_key: str,
    kubeconfig: Path | None,
    slice_paths: tuple[Path, ...],
    claim_path: Path | None,
    node_paths: tuple[Path, ...],
    class_paths: tuple[Path, ...],
    allocated_paths: tuple[Path, ...],
    output: str,
    exit_zero: bool,
) -> None:
    """Which domains of a node label can hold a job of --pods pods, and why the others cannot.

    Every pod gets a claim from the template. Against a cluster: NAMESPACE/TEMPLATE (a
    ResourceClaimTemplate). Offline: --slices, --claim and --nodes (plus --classes,
    --allocated). Exits 1 when no domain holds the job (--exit-zero: 0).
    """
    if ref is not None:
        namespace, sep, name = ref.partition("/")
        if not sep or not namespace or not name:
            raise click.BadParameter(f"{ref!r}: write NAMESPACE/TEMPLATE", param_hint="REF")
        inputs = from_cluster(namespace, name, kubeconfig, template=True)
    elif slice_paths and claim_path is not None and node_paths:
        inputs = from_files(slice_paths, claim_path, class_paths, allocated_paths)
        inputs = dataclasses.replace(inputs, nodes=read_nodes(node_paths))
    else:
        raise click.UsageError(
            "give NAMESPACE/TEMPLATE, or --slices, --claim and --nodes (the Nodes' labels name "
            "the domains)"
        )
    if inputs.nodes is None:  # from files: every node a slice names, unlabelled
        names = sorted({s.spec.node_name for s in inputs.slices if s.spec.node_name})
        inputs = dataclasses.replace(inputs, nodes=[Node.named(n) for n in names])
    ex = explain_job(
        inputs.claim,
        inputs.slices,
        inputs.classes,
        inputs.allocated,
        inputs.nodes or [],
        pods=pods,
        topology_key=topology_key,
    )
    if output == "json":
        click.echo(json.dumps(ex.model_dump(), indent=2))
    else:
        click.echo(render_job(ex))
    if not exit_zero and not any(d.fits for d in ex.domains):
        sys.exit(1)
