"""NicConfig through drakit_parse_config (the hook the webhook runs too): errors name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drakit.errors import ConfigInvalid
from drakit.testing import SimHost
from drakit.testing.plugin import HostFactory, SimNodeFactory
from drakit_amd_ainic.config import NicConfig

DRIVER = "ainic.amd.drakit.io"
BASE = {"apiVersion": "ainic.drakit.io/v1alpha1", "kind": "NicConfig"}


@pytest.fixture
def host(tmp_path: Path, drakit_sim_node: SimNodeFactory, drakit_host: HostFactory) -> SimHost:
    node = drakit_sim_node("minimal-1s", node_name="n")
    return drakit_host({"plugins": {"amd_ainic": {}}}, node)


def test_a_full_config_parses(host: SimHost) -> None:
    got = host.parse_config(
        DRIVER,
        {
            **BASE,
            "queues": 8,
            "bandwidth": 50,
            "vf": {
                "mac": "02:00:00:00:00:0A",
                "vlan": 7,
                "trust": False,
                "spoofChk": True,
                "mtu": 9000,
            },
            "rdma": {"enabled": True},
        },
    )
    assert isinstance(got, NicConfig)
    assert got.vf is not None
    assert got.vf.mac == "02:00:00:00:00:0a"


@pytest.mark.parametrize(
    ("fields", "path", "fix"),
    [
        ({"queues": 0}, "queues", "greater than or equal to 1"),
        ({"bandwidth": "fast"}, "bandwidth", "integer"),
        ({"vf": {"vlan": 4095}}, "vf.vlan", "4094"),
        ({"vf": {"mac": "zz"}}, "vf.mac", "write it as 02:00:00:00:00:01"),
        ({"vf": {"mac": "01:00:5e:00:00:01"}}, "vf.mac", "first octet must be even"),
        ({"vf": {"mtu": 20}}, "vf.mtu", "68"),
        ({"vf": {"spoofchk": True}}, "vf.spoofchk", ""),
        ({"rdma": {"enabled": "maybe"}}, "rdma.enabled", "boolean"),
        ({"queus": 4}, "queus", ""),
        ({"interface": {"name": "a-very-long-name0"}}, "interface.name", "1 to 15 bytes"),
        ({"interface": {"name": "net/1"}}, "interface.name", "no '/', ':'"),
        ({"interface": {"name": "lo"}}, "interface.name", "loopback"),
        ({"interface": {"mtu": 67}}, "interface.mtu", "68"),
        ({"interface": {"addresses": ["10.0.0.5"]}}, "interface.addresses", "CIDR form"),
        ({"interface": {"addresses": ["10.0.0.500/24"]}}, "interface.addresses", "CIDR form"),
        ({"interface": {"addresses": ["224.0.0.1/4"]}}, "interface.addresses", "unicast"),
        (
            {"interface": {"addresses": ["10.0.0.5/24", "10.0.0.5/24"]}},
            "interface.addresses",
            "listed twice",
        ),
        ({"interface": {"nmae": "net1"}}, "interface.nmae", ""),
    ],
)
def test_errors_name_the_field(host: SimHost, fields: dict[str, Any], path: str, fix: str) -> None:
    with pytest.raises(ConfigInvalid) as e:
        host.parse_config(DRIVER, {**BASE, **fields})
    paths = [p for p, _ in e.value.errors]
    assert path in paths, e.value.errors
    assert fix in str(e.value)


def test_other_kinds_are_not_ours(host: SimHost) -> None:
    with pytest.raises(ConfigInvalid):
        host.parse_config(DRIVER, {"apiVersion": "cpu.drakit.io/v1alpha1", "kind": "CpuConfig"})


def test_interface_parses_and_normalises_addresses(host: SimHost) -> None:
    got = host.parse_config(
        DRIVER,
        {**BASE, "interface": {"name": "net1", "mtu": 9000, "addresses": ["FD00::5/64"]}},
    )
    assert isinstance(got, NicConfig)
    assert got.interface is not None
    assert (got.interface.name, got.interface.mtu) == ("net1", 9000)
    assert got.interface.addresses == ("fd00::5/64",)
