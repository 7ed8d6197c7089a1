"""Simulated-hardware profiles as entry points, vendor parts outside core, the simulator seam.

A vendor's profile is installed here for real: a distribution (``acme-sim``: its
``.dist-info`` with a ``drakit.profiles`` entry point, and its module) is written to a
directory that the ``drakit`` processes get on ``PYTHONPATH``, so ``importlib.metadata`` finds
it exactly as it finds a ``pip install``-ed package.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from tests.treedigest import tree_digest

from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.sim import (
    BUILTIN_DISTRIBUTION,
    MachineSpec,
    SimSpecError,
    UnknownProfileError,
    build_profile,
    get_profile,
    list_profiles,
    profile_info,
    profile_source,
    register_profile,
)

REPO = Path(__file__).resolve().parents[2]

# Digests of every profile's tree (paths, file bytes, symlink targets), taken on the commit
# before vendor parts moved out of core (c811c26): the move must not change a byte. The three
# profiles with H100/H200 GPUs were taken again when the fake NVML's Hopper table gained the
# 1g.10gb+me profile (c0c4c72): their drakit-sim/nvml.json is the only file that changed; and
# again when the NVIDIA driver's user space was added (usr/, run/, lib/firmware: the NVIDIA
# backend's driver_files): without those three directories the trees gave the digests before.
BEFORE = {
    "dgx-h100": "b8bec1cbc15e6447beb8a72875825af1ff86aa8236d926267cd8c0053c815f08",
    "epyc-genoa-2s": "df7584ea2166124f0d43866ea45332b8278d51a6d2a78fe2779d04e5a14f518d",
    "epyc-genoa-2s-nps4": "747150aa1d5b7d2fbe86b5e24626bab355a1ec7b799cc6fce65135f5b7f8ed3f",
    "h200-8gpu-8ainic": "7322ff00a7a7c5a1be0425827bfd839795c469ada99bc81f3fe3132a08fc2fad",
    "h200-8gpu-8ainic-sriov": "94749d3db5944eaa587ed94ee4b6594a56f332c4572785fb86b081a9f8dca209",
    "mi300x-8gpu-8ainic": "ab1ad9fd46a065c28e51594e42bfc16bcf6868d0964cb3b285745cad7f31cfea",
    "mi300x-8gpu-8ainic-16vf": "4f16844953a9bd9f320f44a5e8e0f4ae9110f2a2eb7f76701f55c2ade77c0418",
    "minimal-1s": "672a630cec5df694f2ca2b8921da33d5e358bde7c0bb9d32eeb734b9bd8db751",
    "spr-2s-snc2": "ab6cf7d8737e7d609fb726db9acbe5c0a12ec6d20649eb97ba14649afcb6e01f",
}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_profile_builds_the_same_tree_as_before_the_move(name: str) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("DRAKIT_TEST_TMP")) as tmp:
        assert tree_digest(build_profile(name, Path(tmp) / "root")) == BEFORE[name]


def test_profiles_come_from_core_and_the_reference_distribution() -> None:
    assert set(BEFORE) <= set(list_profiles())
    cpu_only = {"minimal-1s", "epyc-genoa-2s", "epyc-genoa-2s-nps4", "spr-2s-snc2"}
    for name in BEFORE:
        want = BUILTIN_DISTRIBUTION if name in cpu_only else "drakit-sim-profiles"
        assert profile_source(name) == want
        assert profile_info(name).distribution == want


def test_core_spec_has_no_vendor_fields() -> None:
    fields = set(MachineSpec.__dataclass_fields__)
    assert fields == {"name", "description", "cpu", "pci_roots", "parts"}
    kinds = {type(p).__name__ for p in get_profile("dgx-h100").parts}
    assert kinds == {"NvmlDescription"}
    assert {type(p).__module__ for p in get_profile("mi300x-8gpu-8ainic").parts} == {
        "drakit_amd_gpu.sim.kfd"
    }


def test_unknown_profile_names_the_known_ones_and_the_missing_package() -> None:
    with pytest.raises(UnknownProfileError) as caught:
        get_profile("acme-4fpga")
    message = str(caught.value)
    assert "'acme-4fpga'" in message
    assert "minimal-1s" in message
    assert "drakit.profiles" in message
    assert "install the distribution" in message


def test_register_profile_refuses_an_installed_name_unless_replacing() -> None:
    with pytest.raises(ValueError, match="already exists"):
        register_profile("dgx-h100", lambda: get_profile("minimal-1s"))


def test_the_runtime_hands_the_fake_nvml_from_the_entry_point_to_the_backends() -> None:
    settings = DrakitSettings(profile="dgx-h100", plugins={"cpu": {}})
    with open_host(settings) as host:
        lib = host.libraries["pynvml"]
    assert type(lib).__module__ == "drakit_nvidia_gpu.sim.fakenvml"
    settings = DrakitSettings(profile="minimal-1s", plugins={"cpu": {}})
    with open_host(settings) as host:
        assert host.libraries == {}


# -- a vendor's profile, installed as a distribution -------------------------------------------

ACME_MODULE = """
from drakit.sim import MachineSpec, NetDevSpec, PciDeviceSpec, PciRootSpec, get_profile


def acme_box() -> MachineSpec:
    nic = PciDeviceSpec(
        address="0000:05:00.0", vendor=0x8086, device=0x1593, class_code=0x020000,
        driver="ice", netdevs=(NetDevSpec(name="ens5", mac="00:11:22:33:44:55"),),
    )
    return MachineSpec(
        name="acme-box",
        description="Acme test box: 1 socket, one Ethernet port",
        cpu=get_profile("minimal-1s").cpu,
        pci_roots=(PciRootSpec(bus=5, numa_node=0, children=(nic,)),),
    )


def misnamed() -> MachineSpec:
    return acme_box()
"""


@pytest.fixture(scope="module")
def acme_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("acme-site")
    (site / "acme_sim_profiles.py").write_text(textwrap.dedent(ACME_MODULE), encoding="utf-8")
    info = site / "acme_sim-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-sim\nVersion: 0.1.0\n", encoding="utf-8"
    )
    eps = configparser.ConfigParser()
    eps["drakit.profiles"] = {
        "acme-box": "acme_sim_profiles:acme_box",
        "acme-misnamed": "acme_sim_profiles:misnamed",
        "acme-broken": "acme_sim_profiles_missing:factory",
    }
    with (info / "entry_points.txt").open("w", encoding="utf-8") as fh:
        eps.write(fh)
    return site


def drakit(site: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAKIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run(
        [sys.executable, "-c", "from drakit.commands.cli import main; main()", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_sim_list_shows_an_installed_vendor_profile_with_its_distribution(
    acme_site: Path,
) -> None:
    done = drakit(acme_site, "sim", "list", "-o", "json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    assert rows["acme-box"]["distribution"] == "acme-sim"
    assert rows["acme-box"]["nics"] == 1
    assert rows["h200-8gpu-8ainic"]["distribution"] == "drakit-sim-profiles"
    assert rows["minimal-1s"]["distribution"] == "drakit"
    assert "acme_sim_profiles_missing" in str(rows["acme-broken"]["error"])
    table = drakit(acme_site, "profiles")
    assert table.returncode == 0, table.stderr
    assert "acme-box" in table.stdout
    assert "acme-sim" in table.stdout


@pytest.mark.slow
def test_commands_take_an_installed_vendor_profile(acme_site: Path) -> None:
    done = drakit(acme_site, "discover", "--profile", "acme-box", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert {r["pool"] for r in json.loads(done.stdout)} == {"acme-box"}
    done = drakit(acme_site, "slices", "--profile", "acme-box", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert "acme-box" in done.stdout
    done = drakit(acme_site, "cpu", "topology", "--profile", "acme-box", "-o", "json")
    assert done.returncode == 0, done.stderr


def test_sim_build_writes_a_vendor_profile(acme_site: Path, tmp_path: Path) -> None:
    done = drakit(acme_site, "sim", "build", "--profile", "acme-box", str(tmp_path / "root"))
    assert done.returncode == 0, done.stderr
    machine = json.loads((tmp_path / "root/drakit-sim/machine.json").read_text())
    assert machine["name"] == "acme-box"
    assert (tmp_path / "root/sys/bus/pci/devices/0000:05:00.0").is_symlink()


@pytest.mark.parametrize(
    ("profile", "needle"),
    [
        ("acme-misnamed", "returned a spec named 'acme-box'"),
        ("acme-broken", "acme_sim_profiles_missing"),
        ("acme-4fpga", "install the distribution"),
    ],
)
def test_bad_vendor_profiles_fail_in_one_line(acme_site: Path, profile: str, needle: str) -> None:
    done = drakit(acme_site, "discover", "--profile", profile)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("drakit: error: ")
    assert needle in line
    assert profile in line


# -- the seam: production code never loads the simulator on real hardware ----------------------


def test_a_real_root_loads_nothing_of_the_simulator(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    code = textwrap.dedent(f"""
        import sys
        from drakit.host.settings import DrakitSettings
        from drakit.host.startup import open_host
        import drakit.commands.cli, drakit.node.daemon, drakit_cpu.cli
        settings = DrakitSettings(sysfs_root={str(tmp_path)!r}, plugins={{"composite": {{}}}})
        with open_host(settings) as host:
            assert host.libraries == {{}}
        loaded = sorted(m for m in sys.modules if m == "drakit.sim" or m.endswith(".sim")
                        or m.startswith(("drakit.sim.", "drakit_sim_profiles")))
        print(loaded)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAKIT_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _contract_sources() -> set[str]:
    parser = configparser.ConfigParser()
    parser.read(REPO / ".importlinter", encoding="utf-8")
    section = parser["importlinter:contract:no-simulator-in-production"]
    return set(section["source_modules"].split())


def _children(package_dir: Path, package: str) -> set[str]:
    names = {p.stem for p in package_dir.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file()}
    return {f"{package}.{n}" for n in names}


@pytest.mark.parametrize(
    ("package", "where"),
    [
        ("drakit", "core/src/drakit"),
        ("drakit_nvidia_gpu", "plugins/nvidia_gpu/src/drakit_nvidia_gpu"),
        ("drakit_amd_gpu", "plugins/amd_gpu/src/drakit_amd_gpu"),
        ("drakit_amd_ainic", "plugins/amd_ainic/src/drakit_amd_ainic"),
    ],
)
def test_the_no_simulator_contract_lists_every_production_module(package: str, where: str) -> None:
    simulator = {f"{package}.sim", "drakit.testing"}
    missing = _children(REPO / where, package) - simulator - _contract_sources()
    assert not missing, (
        f"add {sorted(missing)} to source_modules of the no-simulator-in-production contract "
        "in .importlinter (a forbidden contract does not see imports inside one listed package)"
    )


def test_spec_errors_of_an_entry_point_name_the_distribution(acme_site: Path) -> None:
    done = drakit(acme_site, "sim", "build", "--profile", "acme-broken", "/nonexistent/x")
    assert done.returncode == 2
    assert "acme-sim" in done.stderr
    assert SimSpecError.__name__ not in done.stderr  # one line, no traceback
