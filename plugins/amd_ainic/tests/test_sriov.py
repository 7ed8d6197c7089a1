"""VF creation through ``sriov_numvfs`` on the simulated kernel (``SriovKernel``)."""

from __future__ import annotations

import os
from pathlib import Path

from drakit.sim import SysfsBuilder, get_profile
from drakit_amd_ainic.sim import SriovKernel, ainic_machine
from drakit_amd_ainic.sriov import set_numvfs


def test_vfs_whose_firmware_gives_no_rdma_are_used_without_it(tmp_path: Path) -> None:
    """ionic adds an RDMA device only to a LIF with the capability: VFs may have none."""
    spec = ainic_machine(
        "no-vf-rdma", get_profile("minimal-1s").cpu, pfs=1, vfs=0, total_vfs=4, vf_rdma=False
    )
    root = SysfsBuilder(spec).build(tmp_path / "root")
    pf = Path(os.path.realpath(root / "sys/bus/pci/devices/0000:11:00.0"))
    assert (pf / "infiniband").is_dir(), "the PF has RDMA, so its VFs' is waited for"
    with SriovKernel(spec, root):
        assert set_numvfs(pf, 4, timeout=10) == 4
        vfs = [pf / f"virtfn{i}" for i in range(4)]
        assert all((vf / "net").is_dir() for vf in vfs)
        assert not any((vf / "infiniband_verbs").is_dir() for vf in vfs)
        assert set_numvfs(pf, 0, timeout=10) == 0
