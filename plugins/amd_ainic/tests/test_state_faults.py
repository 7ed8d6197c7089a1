"""Fault injection at every state-file operation of a VF share's prepare and unprepare (issue 30).

The node (the real pipeline, kubelet socket, checkpoint, CDI specs and the AINIC VF ledger, all
through :mod:`drakit.statefiles`) prepares and unprepares one share of an on-demand VF pool. The
file-system calls of :mod:`drakit.statefiles` (the OS seam: ``open``, ``read``, ``write``,
``fsync``, ``replace``, ``unlink``, ``mkdir``, ``fstat``) are counted once without faults; then,
for every one of them in turn, that call fails with EIO (a disk error) and:

* the kubelet's call answers (no exception escapes, no hang); a failed claim's error names the
  file and says it will retry;
* with the fault gone, the kubelet's retry succeeds, a second share gets a *different* VF
  (nothing held is handed out again), and unpreparing both leaves no VF, no assignment in the
  ledger, no CDI spec and no checkpoint record behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from drakit.models import ClaimRef
from drakit.testing import StateFaults, state_faults

from .conftest import AinicNode, ainic_node

SHARE = {"queues": "4", "bandwidth": "25", "vfs": "1"}


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[AinicNode, StateFaults]]:
    with (
        state_faults() as faulty,
        ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=2) as n,
    ):
        yield n, faulty


def ledger_assignments(n: AinicNode) -> list[Any]:
    path = next(n.running.state_dir.rglob("vf-ledger.json"), None)
    if path is None:
        return []
    return list(json.loads(path.read_text())["data"]["assignments"])


def clean(n: AinicNode, pf: str, *refs: ClaimRef) -> None:
    """Both shares unprepared: nothing of them is left anywhere."""
    for ref in refs:
        assert not n.unprepare(ref)[ref.uid].error
    assert n.numvfs(pf) == 0, "the on-demand pool is gone"
    assert ledger_assignments(n) == []
    assert not [p for p in n.cdi_dir.iterdir() if any(r.uid in p.name for r in refs)]
    assert not set(n.state.prepared_claims()) & {r.uid for r in refs}


def _seam_calls(n: AinicNode, faulty: StateFaults, op: str) -> int:
    """How many seam calls ``op`` (prepare or unprepare of one share) makes without faults."""
    a = n.add("count-a", [("nic", "ainic-0", SHARE)])
    faulty.calls.clear()
    assert not n.prepare(a)[a.uid].error
    made = len(faulty.calls)
    faulty.calls.clear()
    assert not n.unprepare(a)[a.uid].error
    unmade = len(faulty.calls)
    return made if op == "prepare" else unmade


@pytest.mark.parametrize("op", ["prepare", "unprepare"])
def test_every_state_file_operation_failing_is_survived(
    node: tuple[AinicNode, StateFaults], op: str
) -> None:
    n, faulty = node
    pf = n.plugin._view.published["ainic-0"].nic.pf.bdf
    total = _seam_calls(n, faulty, op)
    assert total > 5, faulty.calls  # the checkpoint, the CDI spec and the ledger at least
    failed = 0
    for k in range(total):
        a = n.add(f"{op}-{k}-a", [("nic", "ainic-0", SHARE)])
        b = n.add(f"{op}-{k}-b", [("nic", "ainic-0", SHARE)])
        if op == "unprepare":
            assert not n.prepare(a)[a.uid].error
        faulty.calls.clear()
        with faulty.failing(k):
            call = n.prepare if op == "prepare" else n.unprepare
            error = call(a)[a.uid].error
        if error:
            failed += 1
            assert "I/O error" in error, (k, faulty.calls[k], error)
            assert "will retry" in error, (k, error)
            assert str(n.running.state_dir) in error, (k, error)  # names the file
        if op == "unprepare" and error:
            assert not n.unprepare(a)[a.uid].error, k  # the kubelet retries
            assert not n.prepare(a)[a.uid].error, k
        else:
            assert not n.prepare(a)[a.uid].error, (k, faulty.calls[k])  # retried or repeated
        assert not n.prepare(b)[b.uid].error, k
        va, vb = (n.prepared(r)[0].state["vf"] for r in (a, b))
        assert va != vb, f"fault at {faulty.calls[k]} #{k}: one VF handed to two shares"
        clean(n, pf, a, b)
    assert failed, "no fault reached the kubelet's answer"
