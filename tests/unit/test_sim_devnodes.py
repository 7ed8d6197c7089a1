"""Simulated device nodes: every node a profile's sysfs promises exists under ``<root>/dev``.

What is promised is read from the built tree itself, as a driver would create nodes for it:
``/dev/nvidia<minor>`` for each GPU of the fake NVML (and the control nodes), the DRM devices
under ``sys/class/drm`` (and ``/dev/kfd``), the uverbs devices under
``sys/class/infiniband_verbs`` (and ``/dev/infiniband/rdma_cm``). As root they are character
devices with the stand-in numbers; without ``CAP_MKNOD`` (run through ``setpriv`` here, or as
a user) they are regular files, with one warning.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from drakit.sim import (
    CONTROL_STAND_IN,
    DEVICE_STAND_IN,
    build_profile,
    get_profile,
    make_device_node,
    remove_device_node,
)
from drakit_amd_ainic.sim import SriovKernel

CAN_MKNOD = os.geteuid() == 0 and os.environ.get("DRAKIT_TEST_NO_MKNOD") is None
CONTROL = {
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/kfd",
    "/dev/infiniband/rdma_cm",
}


def promised(root: Path) -> set[str]:
    """The device nodes a driver would make for the hardware in ``root``'s tree."""
    out: set[str] = set()
    nvml = root / "drakit-sim" / "nvml.json"
    if nvml.exists():
        minors = [d["minor_number"] for d in json.loads(nvml.read_text())["devices"]]
        out |= {f"/dev/nvidia{m}" for m in minors}
        out |= {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    drm = root / "sys/class/drm"
    if drm.is_dir():
        out |= {f"/dev/dri/{p.name}" for p in drm.iterdir()} | {"/dev/kfd"}
    verbs = root / "sys/class/infiniband_verbs"
    if verbs.is_dir() and any(verbs.iterdir()):
        out |= {f"/dev/infiniband/{p.name}" for p in verbs.iterdir()}
        out.add("/dev/infiniband/rdma_cm")
    return out


def made(root: Path) -> dict[str, os.stat_result]:
    """Every node under ``root/dev``, by its path as a container sees it."""
    out = {}
    for dirpath, _, names in os.walk(root / "dev"):
        for name in names:
            path = os.path.join(dirpath, name)
            out["/" + os.path.relpath(path, root)] = os.lstat(path)
    return out


@pytest.mark.parametrize(
    "name", ["dgx-h100", "h200-8gpu-8ainic", "mi300x-8gpu-8ainic-16vf", "epyc-genoa-2s"]
)
def test_a_profile_has_exactly_the_nodes_its_sysfs_promises(name: str, tmp_path: Path) -> None:
    root = build_profile(name, tmp_path / "root")
    nodes = made(root)
    assert set(nodes) == promised(root)
    if name == "epyc-genoa-2s":
        assert nodes == {}  # CPUs have no device nodes
        return
    for path, st in nodes.items():
        if CAN_MKNOD:
            assert stat.S_ISCHR(st.st_mode), path
            want = CONTROL_STAND_IN if path in CONTROL else DEVICE_STAND_IN
            assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == want, path
            assert stat.S_IMODE(st.st_mode) == 0o666
        else:
            assert stat.S_ISREG(st.st_mode), path


def test_vfs_the_simulated_kernel_makes_bring_their_uverbs_nodes(tmp_path: Path) -> None:
    name = "h200-8gpu-8ainic"
    root = build_profile(name, tmp_path / "root")
    before = set(made(root))
    pf = next(
        p for p in sorted((root / "sys/bus/pci/devices").iterdir()) if (p / "sriov_numvfs").exists()
    )
    kernel = SriovKernel(get_profile(name), root)
    (pf / "sriov_numvfs").write_text("2\n")
    kernel.step()
    added = set(made(root)) - before
    assert len(added) == 2
    assert {p.rsplit("/", 1)[1] for p in added} <= {
        p.name for p in (root / "sys/class/infiniband_verbs").iterdir()
    }
    assert set(made(root)) == promised(root)
    (pf / "sriov_numvfs").write_text("0\n")
    kernel.step()
    assert set(made(root)) == before


def test_a_node_is_made_once_and_removed_without_error(tmp_path: Path) -> None:
    assert make_device_node(tmp_path, "/dev/x/y0") is CAN_MKNOD
    assert make_device_node(tmp_path, "/dev/x/y0") is CAN_MKNOD  # there already: kept
    remove_device_node(tmp_path, "/dev/x/y0")
    remove_device_node(tmp_path, "/dev/x/y0")  # gone already: fine
    assert not (tmp_path / "dev/x/y0").exists()
    with pytest.raises(ValueError, match="not a device node path under /dev"):
        make_device_node(tmp_path, "/etc/passwd")
    with pytest.raises(ValueError, match="not a device node path under /dev"):
        make_device_node(tmp_path, "/dev/../etc/x")


CHILD = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
from drakit.sim import make_device_node
print(make_device_node(sys.argv[1], "/dev/a0"), make_device_node(sys.argv[1], "/dev/b/c0"))
"""


def test_without_mknod_nodes_are_regular_files_and_one_warning(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", CHILD, str(tmp_path)]
    if os.geteuid() == 0:  # drop CAP_MKNOD, as a container without it or a user has none
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: cannot run without CAP_MKNOD")
        argv = [setpriv, "--bounding-set", "-mknod", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.split() == ["False", "False"]
    for rel in ("dev/a0", "dev/b/c0"):
        assert stat.S_ISREG((tmp_path / rel).lstat().st_mode)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, done.stderr
    assert "not character devices" in warnings[0]
    assert "CAP_MKNOD" in warnings[0]
