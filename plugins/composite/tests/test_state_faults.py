"""Fault injection at every state-file operation of a composed prepare (issue 30).

A locked-in CPU share (the composite preparing its CPU group through the CPU backend, the
member recorded in the checkpoint) is prepared and unprepared through the real pipeline while
each file-system call of :mod:`drakit.statefiles` in turn fails with EIO (the OS seam: every
checkpoint, CDI spec and lock operation). The call answers with an error naming the file, or
succeeds; with the fault gone the retry succeeds, a lone claim on the share's CPU group never
gets the share's CPUs (and one for all of them is refused), and unpreparing leaves no checkpoint
record or CDI spec.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.prepare.pipeline import DriverState
from drakit.testing import ClaimStore, StateFaults, state_faults

from .test_locked import DRIVER, PROFILE, claim, cpusets, plugins


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[tuple[DriverState, ClaimStore, Path, StateFaults]]:
    with (
        state_faults() as faulty,
        open_host(DrakitSettings(profile=PROFILE, plugins=plugins())) as h,
    ):
        claims = ClaimStore(copy=False)
        state = DriverState(
            DRIVER, h, claims, state_dir=tmp_path / "state", cdi_dir=tmp_path / "cdi", boot_id="t"
        )
        try:
            yield state, claims, tmp_path, faulty
        finally:
            state.close()


@pytest.mark.parametrize("op", ["prepare", "unprepare"])
def test_every_state_file_operation_of_a_share_failing_is_survived(
    pipeline: tuple[DriverState, ClaimStore, Path, StateFaults], op: str
) -> None:
    state, claims, tmp, faulty = pipeline
    node = state.host.node.name
    probe = claim(claims, node, [{"device": "cpu-numa-0-share-0"}])
    faulty.calls.clear()
    assert state.prepare([probe])[probe.uid].error == ""
    made = len(faulty.calls)
    faulty.calls.clear()
    assert state.unprepare([probe])[probe.uid].error == ""
    total = made if op == "prepare" else len(faulty.calls)
    assert total > 3, faulty.calls
    failed = 0

    def lone_claim(cpus: int) -> Any:
        result = {"consumedCapacity": {"cpu": str(cpus)}, "shareID": str(uuid.uuid4())}
        return claim(claims, node, [{"device": "cpu-numa-0", **result}])

    for k in range(total):
        share = claim(claims, node, [{"device": "cpu-numa-0-share-0"}])
        lone, whole = lone_claim(84), lone_claim(112)
        if op == "unprepare":
            assert state.prepare([share])[share.uid].error == ""
        faulty.calls.clear()
        with faulty.failing(k):
            call = state.prepare if op == "prepare" else state.unprepare
            error = call([share])[share.uid].error
        if error:
            failed += 1
            assert "I/O error" in error, (k, faulty.calls[k], error)
            assert str(tmp) in error, (k, error)  # names the file
            assert "will retry" in error, (k, error)
        if op == "unprepare" and error:
            assert state.unprepare([share])[share.uid].error == "", k  # the kubelet retries
            assert state.prepare([share])[share.uid].error == "", k
        else:
            assert state.prepare([share])[share.uid].error == "", k  # retried or repeated
        [held] = cpusets(tmp, share.uid).values()
        assert len(held) == 28
        err = state.prepare([whole])[whole.uid].error
        assert "not enough cpus available" in err, (k, faulty.calls[k], err)
        assert state.prepare([lone])[lone.uid].error == "", k
        [rest] = cpusets(tmp, lone.uid).values()
        assert not rest & held, f"fault at {faulty.calls[k]} #{k}: a share's CPUs given twice"
        done = state.unprepare([share, lone, whole])  # the refused one is on record too
        assert not [r.error for r in done.values() if r.error], (k, done)
        assert not set(state.prepared_claims()) & {share.uid, lone.uid, whole.uid}, k
        assert not [p for p in (tmp / "cdi").iterdir() if share.uid in p.name or lone.uid in p.name]
    assert failed, "no fault reached the kubelet's answer"
