"""``drakit explain job``: which topology domains hold a job's pods (``drakit.explain.job``).

The inputs are the files of ``docs/examples/multi-node/``: three nodes' AINIC slices (four NICs
each, rails 0, 0, 1, 1) rendered by ``drakit slices`` from the simulated profiles, the Nodes
with their ``topology.drakit.io/fabric`` labels (``fabric-a``: node-a1; ``fabric-b``: node-b1,
node-b2), a template asking one NIC per rail, and claims of another job on fabric-b.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from drakit.commands.cli import cli
from drakit.explain.job import explain_job
from drakit.explain.sources import from_files, read_nodes

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "multi-node"


def run(*args: str, allocated: bool = True) -> tuple[int, str]:
    argv = [
        "explain",
        "job",
        "--slices",
        str(EXAMPLES / "slices.yaml"),
        "--claim",
        str(EXAMPLES / "template.yaml"),
        "--nodes",
        str(EXAMPLES / "nodes.yaml"),
        "--classes",
        str(EXAMPLES / "classes.yaml"),
        *(["--allocated", str(EXAMPLES / "allocated.yaml")] if allocated else []),
        *args,
    ]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    return result.exit_code, result.output


def domains(output: str) -> dict[str, Any]:
    return {d["domain"]: d for d in json.loads(output)["domains"]}


def test_only_the_domain_with_room_for_every_pod_holds_the_job() -> None:
    code, out = run("--pods", "3", "-o", "json", allocated=False)
    assert code == 0
    got = domains(out)
    assert {k: (d["fits"], d["pods"]) for k, d in got.items()} == {
        "fabric-a": (False, 2),
        "fabric-b": (True, 3),
    }
    # each pod one NIC per rail: ainic-0/1 are rail 0, ainic-2/3 rail 1
    for p in got["fabric-b"]["placements"]:
        assert sorted(r["device"] for r in p["allocation"]) in (
            ["ainic-0", "ainic-2"],
            ["ainic-1", "ainic-3"],
        )
    # fabric-a says why its third pod fits nowhere: its own first two pods hold the NICs
    [blocked] = got["fabric-a"]["blocked"]
    assert blocked["node"] == "node-a1"
    text = " ".join(r["message"] for r in blocked["reasons"])
    assert "in use by training/one-nic-per-rail-pod-0" in text


def test_no_domain_holds_it_when_other_claims_take_the_room() -> None:
    code, out = run("--pods", "3")
    assert code == 1  # no domain: exit 1
    assert "no domain can hold it" in out
    assert "fabric-b (2 nodes): holds 2 of 3 pods" in out
    assert "in use by training/other-0-nics" in out
    code, _ = run("--pods", "3", "--exit-zero")
    assert code == 0
    code, out = run("--pods", "2")
    assert code == 0
    assert "fits in fabric-a, fabric-b" in out


def test_nodes_without_the_label_are_in_no_domain() -> None:
    nodes = read_nodes([EXAMPLES / "nodes.yaml"])
    inputs = from_files(
        [EXAMPLES / "slices.yaml"], EXAMPLES / "template.yaml", [EXAMPLES / "classes.yaml"]
    )
    unlabelled = [
        n.model_copy(update={"metadata": n.metadata.model_copy(update={"labels": {}})})
        if n.name == "node-a1"
        else n
        for n in nodes
    ]
    ex = explain_job(
        inputs.claim,
        inputs.slices,
        inputs.classes,
        [],
        unlabelled,
        pods=2,
        topology_key="topology.drakit.io/fabric",
    )
    assert [d.domain for d in ex.domains] == ["fabric-b"]
    assert ex.unlabelled == ["node-a1"]
    # another key: the hostname makes every node its own domain
    ex = explain_job(
        inputs.claim,
        inputs.slices,
        inputs.classes,
        [],
        nodes,
        pods=2,
        topology_key="kubernetes.io/hostname",
    )
    assert [(d.domain, d.fits) for d in ex.domains] == [
        ("node-a1", True),
        ("node-b1", True),
        ("node-b2", True),
    ]
    ex = explain_job(
        inputs.claim,
        inputs.slices,
        inputs.classes,
        [],
        nodes,
        pods=3,
        topology_key="kubernetes.io/hostname",
    )
    assert not any(d.fits for d in ex.domains)


def test_a_job_needs_a_pod_and_its_inputs() -> None:
    code, out = run("--pods", "0")
    assert code == 2
    assert "--pods" in out
    result = CliRunner().invoke(cli, ["explain", "job", "--pods", "2"])
    assert result.exit_code == 2
    assert "give NAMESPACE/TEMPLATE, or --slices, --claim and --nodes" in result.output
    result = CliRunner().invoke(cli, ["explain", "job", "no-slash", "--pods", "2"])
    assert result.exit_code == 2
    assert "write NAMESPACE/TEMPLATE" in result.output
    inputs = from_files([EXAMPLES / "slices.yaml"], EXAMPLES / "template.yaml")
    with pytest.raises(ValueError, match="at least one pod"):
        explain_job(inputs.claim, inputs.slices, inputs.classes, [], [], pods=0, topology_key="x")
