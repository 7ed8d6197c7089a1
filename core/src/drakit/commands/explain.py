"""The ``drakit explain`` command (also ``kubectl drakit explain``).

Offline it reads ResourceSlices, the claim, DeviceClasses and already allocated claims from
YAML/JSON files; ``drakit explain claim NS/NAME`` reads them from the cluster through
:mod:`drakit.kube`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError

from drakit.allocator import DeviceClass, Node, ResourceClaim, ResourceSlice
from drakit.config import validation_errors
from drakit.errors import ConfigInvalid
from drakit.explain.report import Explanation, explain, render

__all__ = ["explain_command", "read_objects"]

RESOURCE = "/apis/resource.k8s.io/v1"


def read_objects(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """API objects from YAML/JSON files or directories (``List`` objects are flattened).

    Raises:
        ConfigInvalid: a file cannot be read or parsed.
    """
    out: list[dict[str, Any]] = []
    for path in paths:
        files = (
            sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
            if path.is_dir()
            else [path]
        )
        for f in files:
            try:
                docs = list(yaml.safe_load_all(f.read_text(encoding="utf-8")))
            except (OSError, yaml.YAMLError) as e:
                raise ConfigInvalid([("", f"cannot read: {e}")], source=str(f)) from None
            for doc in docs:
                if isinstance(doc, dict) and isinstance(doc.get("items"), list):
                    out += [d for d in doc["items"] if isinstance(d, dict)]
                elif isinstance(doc, dict):
                    out.append(doc)
    return out


def _parse(kind: type[Any], docs: list[dict[str, Any]], source: str) -> list[Any]:
    parsed = []
    for i, doc in enumerate(docs):
        try:
            parsed.append(kind.model_validate(doc))
        except ValidationError as e:
            name = (doc.get("metadata") or {}).get("name", f"#{i}")
            raise ConfigInvalid(validation_errors(e), source=f"{source}: {name}") from None
    return parsed


def _claim(doc: dict[str, Any], source: str) -> ResourceClaim:
    if doc.get("kind") == "ResourceClaimTemplate":
        meta = doc.get("metadata") or {}
        doc = {
            "metadata": {"name": meta.get("name", ""), "namespace": meta.get("namespace", "")},
            "spec": doc["spec"]["spec"],
        }
    claim: ResourceClaim = _parse(ResourceClaim, [doc], source)[0]
    return claim


def _emit(ex: Explanation, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(ex.model_dump(), indent=2))
    else:
        click.echo(render(ex))


_OUTPUT = click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
_NODE = click.option(
    "--node",
    "node_names",
    multiple=True,
    help="Only these nodes (default: every node with slices).",
)


@click.group("explain", invoke_without_command=True)
@click.option(
    "--slices",
    "slice_paths",
    multiple=True,
    type=click.Path(path_type=Path, exists=True),
    help="ResourceSlice files or directories (repeatable).",
)
@click.option(
    "--claim",
    "claim_path",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The ResourceClaim (or ResourceClaimTemplate).",
)
@click.option(
    "--classes",
    "class_paths",
    multiple=True,
    type=click.Path(path_type=Path, exists=True),
    help="DeviceClass files or directories.",
)
@click.option(
    "--allocated",
    "allocated_paths",
    multiple=True,
    type=click.Path(path_type=Path, exists=True),
    help="Claims already allocated (with status.allocation).",
)
@_NODE
@_OUTPUT
@click.pass_context
def explain_command(
    ctx: click.Context,
    slice_paths: tuple[Path, ...],
    claim_path: Path | None,
    class_paths: tuple[Path, ...],
    allocated_paths: tuple[Path, ...],
    node_names: tuple[str, ...],
    output: str,
) -> None:
    """Per node, the allocation kube-scheduler would make for a claim, or why there is none.

    Offline: --slices and --claim (plus --classes, --allocated). Against a cluster:
    `drakit explain claim NAMESPACE/NAME`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not slice_paths or claim_path is None:
        raise click.UsageError("give --slices and --claim, or use `drakit explain claim NS/NAME`")
    objs = read_objects(slice_paths)
    slices = _parse(
        ResourceSlice,
        [o for o in objs if o.get("kind", "ResourceSlice") == "ResourceSlice"],
        "slices",
    )
    [claim_doc, *_] = read_objects([claim_path]) or [{}]
    claim = _claim(claim_doc, str(claim_path))
    classes = _parse(DeviceClass, read_objects(class_paths), "classes")
    allocated = _parse(ResourceClaim, read_objects(allocated_paths), "allocated")
    nodes = [Node.named(n) for n in node_names] or None
    _emit(explain(claim, slices, {c.name: c for c in classes}, allocated, nodes), output)


@explain_command.command("claim")
@click.argument("ref", metavar="NAMESPACE/NAME")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Default: $KUBECONFIG or ~/.kube/config.",
)
@_NODE
@_OUTPUT
def explain_claim(
    ref: str, kubeconfig: Path | None, node_names: tuple[str, ...], output: str
) -> None:
    """Explain a claim in the cluster, on every node that has ResourceSlices."""
    from drakit.kube import KubeClient  # noqa: PLC0415 - only this subcommand needs a cluster

    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name:
        raise click.BadParameter(f"{ref!r}: write NAMESPACE/NAME", param_hint="NAMESPACE/NAME")
    kube = KubeClient.from_kubeconfig(kubeconfig)
    try:
        claim = _claim(kube.get_resource_claim(namespace, name), ref)
        slices = _parse(
            ResourceSlice, kube.list_all(f"{RESOURCE}/resourceslices"), "ResourceSlices"
        )
        classes = _parse(DeviceClass, kube.list_all(f"{RESOURCE}/deviceclasses"), "DeviceClasses")
        claims = [
            c
            for c in kube.list_all(f"{RESOURCE}/resourceclaims")
            if (c.get("status") or {}).get("allocation")
        ]
        allocated = _parse(ResourceClaim, claims, "ResourceClaims")
        node_objs = {n["metadata"]["name"]: n for n in kube.list_all("/api/v1/nodes")}
    finally:
        kube.close()
    wanted = node_names or sorted(
        {s.spec.node_name for s in slices if s.spec.node_name} & set(node_objs)
    )
    nodes = [Node.model_validate(node_objs[n]) if n in node_objs else Node.named(n) for n in wanted]
    _emit(explain(claim, slices, {c.name: c for c in classes}, allocated, nodes), output)
