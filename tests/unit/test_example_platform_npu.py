"""docs/examples/platform-npu: simulated hardware that is not a PCI function, end to end.

The example's module is installed for the test as a distribution would be (a ``.dist-info``
with its ``drakit.plugins`` entry point, on ``sys.path``: the ``entry_points`` fixture), so
drakit loads it the way it loads any backend; then the test kit builds the simulated SoC,
discovers the NPUs, allocates a claim and prepares it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from tests.conftest import EntryPoints
from tests.public_api import REPO_ROOT, drakit_imports, public_modules, top_level

from drakit.models import AllocatedDevice, ClaimInfo
from drakit.sysfs import read_pci_functions
from drakit.testing import allocate, build_sim_node, open_host

EXAMPLE = REPO_ROOT / "docs" / "examples" / "platform-npu"
DRIVER = "npu.acme.example.com"


@pytest.fixture
def example(entry_points: EntryPoints, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example, installed as a distribution with its ``acme_npu`` entry point."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    entry_points.install(
        "drakit.plugins", "acme_npu", "from acme_npu import AcmeNpuPlugin as Plugin\n"
    )
    import acme_npu

    yield acme_npu
    sys.modules.pop("acme_npu", None)


def test_the_example_imports_only_public_modules() -> None:
    used = drakit_imports((EXAMPLE / "acme_npu.py").read_text(encoding="utf-8"))
    public = public_modules()
    assert {top_level(m) for m in used} <= set(public), used


def test_the_npus_are_simulated_off_the_pci_bus(example: ModuleType, tmp_path: Path) -> None:
    node = build_sim_node(example.machine(count=3), tmp_path / "root", node_name="soc-1")
    root = node.root
    assert not [f for f in read_pci_functions(root) if f.driver == "acme_npu"]
    npu = root / "sys" / "bus" / "platform" / "devices" / "acme-npu.1"
    assert npu.is_symlink()
    assert (npu / "driver").resolve().name == "acme_npu"
    assert not (npu / "vendor").exists()  # no PCI identity at all
    assert (root / "dev" / "acme-npu2").exists()
    assert [n.index for n in example.read_npus(str(root))] == [0, 1, 2]


def test_discover_allocate_and_prepare_through_the_kit(example: ModuleType, tmp_path: Path) -> None:
    node = build_sim_node(example.machine(count=4), tmp_path / "root", node_name="soc-1")
    with open_host({"plugins": {"acme_npu": {}}}, node) as host:
        published = host.published()
        slices = host.slices()
        assert sorted(d.name for d in published.devices) == [f"npu-{i}" for i in range(4)]
        npu = published.device("npu-2")
        assert npu.driver == DRIVER
        assert npu.attribute("tops") == 40
        assert npu.attribute("serial") == "ACME0002"
        assert npu.capacity["memory"]["value"] == "8192Mi"
        claim = {
            "metadata": {"name": "two"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "npu", "exactly": {"deviceClassName": DRIVER, "count": 2}}
                    ]
                }
            },
        }
        out = allocate([claim], slices)
        assert out.fits
        picked = out.devices("default/two")
        assert len(picked) == 2
        prepared = host.prepare(
            "acme_npu",
            ClaimInfo(
                namespace="default",
                name="two",
                uid="uid-1",
                devices=tuple(
                    AllocatedDevice(request="npu", driver=DRIVER, pool="soc-1", device=d)
                    for d in picked
                ),
            ),
        )
    nodes = sorted(n.path for p in prepared for n in p.edits.device_nodes)
    assert nodes == sorted(f"/dev/acme-npu{d.split('-')[1]}" for d in picked)
