"""drakit.statefiles: the state files of core and backends (issue 30, class 4).

Every kind of damage (junk, truncated, empty, another kind, a wrong checksum, a directory, a
FIFO, a socket, a link) is moved aside under a timestamped name and reported, never followed,
never blocked on; writes are atomic with explicit modes; a FIFO planted at the temp name or the
lock file does not hang the writer. Real files in tmp_path; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drakit.errors import PermanentError
from drakit.prepare.cdi import CdiWriter
from drakit.prepare.checkpoint import Checkpoint, CheckpointStore
from drakit.prepare.metadata import MetadataDevice, MetadataWriter
from drakit.statefiles import (
    PUBLIC_FILE_MODE,
    STATE_FILE_API_VERSION,
    StateDir,
    StateFile,
    write_atomic,
)

CORRUPT = re.compile(r"ledger\.json\.corrupt-\d{8}T\d{6}-\d+-[0-9a-f]{8}")


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``, failing the test when it does not return within ``seconds`` (a FIFO hang)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for more than {seconds} s"
    if errors:
        raise errors[0]
    return out[0]


def test_round_trip_with_modes_and_envelope(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        sf = StateDir(tmp_path / "plugin_state" / "acme").file("ledger.json", kind="Ledger")
        sf.write({"b": [1, 2], "a": "x"})
    finally:
        os.umask(old)
    assert sf.read() == {"a": "x", "b": [1, 2]}
    assert sf.damage is None
    assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(sf.path.parent.stat().st_mode) == 0o700
    doc = json.loads(sf.path.read_text())
    assert doc["apiVersion"] == STATE_FILE_API_VERSION
    assert doc["kind"] == "Ledger"
    assert len(doc["checksum"]) == 64
    assert not list(sf.path.parent.glob(".*tmp"))


def test_missing_file_reads_as_none_without_damage(tmp_path: Path) -> None:
    sf = StateFile(tmp_path / "ledger.json", kind="Ledger")
    assert sf.read() is None
    assert sf.damage is None


def _junk(p: Path) -> None:
    p.write_bytes(b"\x00\xffnot json")


def _truncated(p: Path) -> None:
    StateFile(p, kind="Ledger").write({"assignments": [1, 2, 3]})
    p.write_bytes(p.read_bytes()[:40])


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _edited(p: Path) -> None:
    StateFile(p, kind="Ledger").write({"assignments": [1]})
    p.write_text(p.read_text().replace("[1]", "[2]"))


def _other_kind(p: Path) -> None:
    StateFile(p, kind="Other").write({})


def _bare_json(p: Path) -> None:
    p.write_text('{"assignments": []}')


def _deep(p: Path) -> None:
    p.write_text("[" * 100_000 + "]" * 100_000)


def _directory(p: Path) -> None:
    p.mkdir()
    (p / "inside").write_text("x")


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.fspath(p))
    s.close()


def _link(p: Path) -> None:
    target = p.with_name("elsewhere.json")
    StateFile(target, kind="Ledger").write({"secret": 1})
    p.symlink_to(target)


def _huge(p: Path) -> None:
    p.write_bytes(b" " * 2048)


DAMAGE = {
    "junk": (_junk, "not JSON"),
    "truncated": (_truncated, "not JSON"),
    "empty": (_empty, "not JSON"),
    "edited": (_edited, "checksum mismatch"),
    "other kind": (_other_kind, "kind 'Other'"),
    "bare JSON": (_bare_json, "not a drakit state file"),
    "deeply nested": (_deep, "nested too deeply"),
    "directory": (_directory, "a directory"),
    "FIFO": (_fifo, "a FIFO"),
    "socket": (_socket, "a socket or device"),
    "link": (_link, "a symbolic link"),
    "too large": (_huge, "at most 1024 expected"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_quarantined_named_and_never_blocks(tmp_path: Path, damage: str) -> None:
    make, reason = DAMAGE[damage]
    path = tmp_path / "ledger.json"
    make(path)
    sf = StateFile(path, kind="Ledger", max_bytes=1024 if damage == "too large" else 1 << 20)
    assert within(5, sf.read) is None
    assert sf.damage is not None
    assert reason in sf.damage.reason
    assert CORRUPT.fullmatch(sf.damage.moved_to.name), sf.damage.moved_to
    assert os.path.lexists(sf.damage.moved_to)
    assert not os.path.lexists(path)
    assert str(path) in str(sf.damage)
    assert sf.damage.moved_to.name in str(sf.damage)
    if damage == "link":  # the link moved aside, its target untouched
        assert StateFile(tmp_path / "elsewhere.json", kind="Ledger").read() == {"secret": 1}
    within(5, lambda: sf.write({"fresh": True}))
    assert sf.read() == {"fresh": True}


def test_every_quarantined_copy_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    for _ in range(3):
        _junk(path)
        StateFile(path, kind="Ledger").read()
    assert len(list(tmp_path.glob("ledger.json.corrupt-*"))) == 3


@pytest.mark.parametrize("planted", ["fifo", "link", "directory"])
def test_a_thing_planted_at_the_temp_name_is_replaced_not_followed(
    tmp_path: Path, planted: str
) -> None:
    path = tmp_path / "ledger.json"
    tmp = tmp_path / ".ledger.json.tmp"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    if planted == "fifo":
        os.mkfifo(tmp)
    elif planted == "link":
        tmp.symlink_to(victim)
    else:
        tmp.mkdir()
    sf = StateFile(path, kind="Ledger")
    if planted == "directory":
        with pytest.raises(PermanentError, match="is a directory"):
            within(5, lambda: sf.write({"a": 1}))
        return
    within(5, lambda: sf.write({"a": 1}))
    assert sf.read() == {"a": 1}
    assert victim.read_text() == "keep"


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_write_atomic_gives_the_mode_asked_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "public.json", b"{}", mode=PUBLIC_FILE_MODE, sync_dir=False)
        write_atomic(tmp_path / "private.json", b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "public.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_cdi_spec_and_metadata_writers_share_the_helper(tmp_path: Path, planted: str) -> None:
    """A FIFO at a CDI spec's temp name used to block the writer (no ``O_NONBLOCK``)."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    cdi = CdiWriter(tmp_path / "cdi", "gpu.example.com")
    meta = MetadataWriter(tmp_path / "meta", "gpu.example.com")
    (tmp_path / "cdi").mkdir()
    (tmp_path / "meta" / "uid-1" / "req").mkdir(parents=True)
    temps = [
        tmp_path / "cdi" / f".{cdi.spec_name('uid-1')}.tmp",
        tmp_path / "meta" / "uid-1" / "req" / ".metadata.json.tmp",
    ]
    for tmp in temps:
        if planted == "fifo":
            os.mkfifo(tmp)
        else:
            tmp.symlink_to(victim)
    name = within(5, lambda: cdi.write("uid-1", {"cdiVersion": "0.5.0", "devices": []}))
    dev = MetadataDevice(driver="gpu.example.com", pool="p", name="gpu-0")
    paths = within(
        5,
        lambda: meta.write(
            namespace="ns", name="c", uid="uid-1", pod_claim_name=None, requests={"req": [dev]}
        ),
    )
    for path in (tmp_path / "cdi" / name, paths["req"]):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o644
        assert stat.S_ISREG(path.lstat().st_mode)
    assert victim.read_text() == "keep"
    assert not any(t.exists() or t.is_symlink() for t in temps)


def test_checkpoint_write_does_not_block_on_a_fifo_at_its_temp_name(tmp_path: Path) -> None:
    """The checkpoint shares the helper: a FIFO at its temp name used to hang the driver."""
    os.mkfifo(tmp_path / ".checkpoint.json.tmp")
    store = CheckpointStore(tmp_path / "checkpoint.json", "d.example.com", "boot")
    within(5, lambda: store.save(Checkpoint(driver="d.example.com", boot_id="boot")))
    assert json.loads((tmp_path / "checkpoint.json").read_text())["driver"] == "d.example.com"


def test_lock_does_not_block_on_a_fifo_and_serialises(tmp_path: Path) -> None:
    sd = StateDir(tmp_path / "acme")
    sd._dir().mkdir()
    os.mkfifo(tmp_path / "acme" / "state.lock")
    order: list[str] = []

    def hold() -> None:
        with sd.lock():
            order.append("in")
            order.append("out")

    within(5, hold)
    assert stat.S_ISREG((tmp_path / "acme" / "state.lock").lstat().st_mode)
    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert order == ["in", "out"] * 5


def test_names_and_a_missing_directory_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="state file name"):
        StateDir(tmp_path).file("../escape", kind="X")
    with pytest.raises(PermanentError, match="no state directory"):
        StateDir().file("ledger.json", kind="X")
