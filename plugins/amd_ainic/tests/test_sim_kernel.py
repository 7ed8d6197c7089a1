"""The simulated SR-IOV kernel: VFs appear and vanish as ``sriov_numvfs`` is written."""

from __future__ import annotations

import os
import time
from pathlib import Path

from drakit.sim import SysfsBuilder, get_profile
from drakit_amd_ainic.sim import SriovKernel, set_link, set_rdma_port

PF = "0000:18:00.0"


def wait(cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def links(root: Path) -> set[str]:
    out = set()
    for cls in ("class/net", "class/infiniband", "class/infiniband_verbs", "bus/pci/devices"):
        out |= {f"{cls}/{n}" for n in os.listdir(root / "sys" / cls)}
    return out


def test_numvfs_writes_create_and_remove_vfs(tmp_path: Path) -> None:
    spec = get_profile("h200-8gpu-8ainic")
    root = SysfsBuilder(spec).build(tmp_path / "root")
    pf = (root / "sys/bus/pci/devices" / PF).resolve()
    before = links(root)
    with SriovKernel(spec, root) as kernel:
        (pf / "sriov_numvfs").write_text("3\n")
        wait(lambda: len(list(pf.glob("virtfn*/infiniband_verbs/uverbs*/dev"))) == 3)
        vf = (pf / "virtfn2").resolve()
        assert (vf / "physfn").resolve() == pf
        assert os.listdir(vf / "net") == ["enp24s0v2"]
        assert os.listdir(vf / "infiniband") == ["rocep24s0v2"]
        (uverbs,) = os.listdir(vf / "infiniband_verbs")
        assert (root / "sys/class/infiniband_verbs" / uverbs / "ibdev").read_text().strip() == (
            "rocep24s0v2"
        )
        assert len(os.listdir(vf / "net/enp24s0v2/queues")) == 8
        # the kernel refuses a non-zero to non-zero change
        (pf / "sriov_numvfs").write_text("5\n")
        wait(lambda: kernel.refused)
        assert (pf / "sriov_numvfs").read_text().strip() == "3"
        (pf / "sriov_numvfs").write_text("0\n")
        wait(lambda: not list(pf.glob("virtfn*")))
    assert links(root) == before, "removing VFs leaves no dangling class links"


def test_link_and_port_flips(tmp_path: Path) -> None:
    root = SysfsBuilder(get_profile("h200-8gpu-8ainic")).build(tmp_path / "root")
    net = root / "sys/class/net/enp24s0"
    set_link(root, "enp24s0", up=False)
    assert (net / "operstate").read_text() == "down\n"
    assert (net / "carrier").read_text() == "0\n"
    set_rdma_port(root, "ionic_0", active=False)
    assert (root / "sys/class/infiniband/ionic_0/ports/1/state").read_text() == "1: DOWN\n"
