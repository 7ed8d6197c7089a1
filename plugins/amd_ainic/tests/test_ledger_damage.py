"""The VF ledger lost or damaged while shares run (issue 30, classes 1 and 4).

A running node (real kubelet sockets, checkpoint, simulated SR-IOV kernel): shares are prepared,
then the ledger is deleted, junked, replaced by a FIFO or a directory. The next prepare must not
hang, must move the damage aside under a timestamped name, and must never hand a VF a running
share holds to another share (the checkpoint is the other evidence). ``Ledger.forget`` stands for
a restart of the node process (the ledger is read again from the file).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import AinicNode, ainic_node

SHARE = {"queues": "4", "bandwidth": "25", "vfs": "1"}


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"blocked for more than {seconds} s"
    return out[0]


def vf_of(node: AinicNode, uid: str) -> tuple[str, int]:
    [p] = node.state.prepared_claims()[uid].prepared["amd_ainic"]
    return str(p.state["pf"]), int(p.state["vf"])


def _delete(p: Path) -> None:
    p.unlink()


def _junk(p: Path) -> None:
    p.write_bytes(b'{"assignments": [')


def _fifo(p: Path) -> None:
    p.unlink()
    os.mkfifo(p)


def _directory(p: Path) -> None:
    p.unlink()
    p.mkdir()


def _pre_state_file_format(p: Path) -> None:
    p.write_text('{"assignments": [], "on_demand": {}}')


DAMAGE = {
    "deleted": _delete,
    "junk": _junk,
    "FIFO": _fifo,
    "directory": _directory,
    "replaced by an empty ledger": _pre_state_file_format,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_lost_or_damaged_ledger_never_hands_out_a_running_shares_vf(damage: str) -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=2) as node:
        a = node.add("a", [("nic", "ainic-0", SHARE)])
        assert not node.prepare(a)[a.uid].error
        ledger = node.plugin.preparer.ledger
        assert ledger.path.is_relative_to(node.running.state_dir), "under --state-dir"
        DAMAGE[damage](ledger.path)
        ledger.forget()  # a restart of the node process: the file is read again
        b = node.add("b", [("nic", "ainic-0", SHARE)])
        res = within(10, lambda: node.prepare(b))[b.uid]
        assert not res.error, res.error
        assert vf_of(node, b.uid) != vf_of(node, a.uid), "one VF handed to two shares"
        on_disk = {x.claim for x in ledger.load().assignments}
        assert on_disk == {a.uid, b.uid}
        if damage not in ("deleted",):
            moved = list(ledger.dir.glob("vf-ledger.json.corrupt-*"))
            assert len(moved) == 1, moved
        # a third share finds no free VF (two VFs, two shares): refused, never doubled
        c = node.add("c", [("nic", "ainic-0", SHARE)])
        assert "holds 1 share(s)" in node.prepare(c)[c.uid].error
        res2 = node.unprepare(a, b, c)
        assert not any(r.error for r in res2.values()), res2
        # which VFs were created on demand went with the ledger: drakit cannot tell, so it
        # leaves them (removing VFs it did not create would pull them from under someone)
        assert node.numvfs(vf_of_pf(node)) == 2


def vf_of_pf(node: AinicNode) -> str:
    return node.plugin.published["ainic-0"].nic.pf.bdf


def test_the_ledger_lives_under_the_nodes_state_dir_only() -> None:
    with ainic_node("h200-8gpu-8ainic", default_mode="shared", vf_limit=2) as node:
        a = node.add("a", [("nic", "ainic-0", SHARE)])
        assert not node.prepare(a)[a.uid].error
        path = node.plugin.preparer.ledger.path
        assert path == (
            node.running.state_dir / "state" / "plugin_state" / "amd_ainic" / "vf-ledger.json"
        )
        assert (path.stat().st_mode & 0o777) == 0o600
        assert not node.unprepare(a)[a.uid].error
        shutil.rmtree(path.parent)
