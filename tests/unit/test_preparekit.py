"""The prepare kit (:mod:`drakit.preparekit`): what every backend's prepare hook does alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from drakit.errors import PermanentError
from drakit.models import AllocatedDevice, CdiEdits, NetworkData, PreparedDevice
from drakit.preparekit import prepared_device, published_device, whole_quantity
from drakit.sysfs import read_attribute

DEV = AllocatedDevice(request="nic", driver="nic.example.com", pool="node-a", device="nic-1")


def test_published_device_returns_what_discovery_published() -> None:
    assert published_device({"nic-0": 0, "nic-1": 1}, "nic-1", "unused") == 1


@pytest.mark.parametrize(
    ("published", "known"), [({"b": 1, "a": 2}, "(known: a, b)"), ({}, "(known: none)")]
)
def test_unknown_device_names_the_known_ones(published: dict[str, int], known: str) -> None:
    with pytest.raises(PermanentError) as err:
        published_device(published, "c", "request 'r': 'c' is not a NIC on this node")
    assert str(err.value) == f"request 'r': 'c' is not a NIC on this node {known}"


@pytest.mark.parametrize(("q", "n"), [("4", 4), ("4000m", 4), ("2.0", 2), ("007", 7)])
def test_whole_quantity(q: str, n: int) -> None:
    assert whole_quantity(q, "here", "cpu", most=64, holder="any node") == n


@pytest.mark.parametrize(
    ("q", "message"),
    [
        ("1500m", "here: consumed cpu '1500m' must be a positive whole number of CPUs"),
        ("0", "here: consumed cpu '0' must be a positive whole number of CPUs"),
        ("-2", "here: consumed cpu '-2' must be a positive whole number of CPUs"),
        ("1Gi", "here: consumed cpu '1Gi' is more than any node has"),
        ("65", "here: consumed cpu '65' is more than any node has"),
        ("1e999999", "here: consumed cpu '1e999999' is not a quantity"),
        ("lots", "here: consumed cpu 'lots' is not a quantity"),
        ("9" * 100, f"here: consumed cpu '{'9' * 40}...' is not a quantity"),
    ],
)
def test_whole_quantity_refuses(q: str, message: str) -> None:
    with pytest.raises(PermanentError) as err:
        whole_quantity(q, "here", "cpu", unit=" of CPUs", most=64, holder="any node")
    assert str(err.value) == message


def test_prepared_device_answers_the_allocated_device() -> None:
    edits = CdiEdits(env=("A=1",))
    net = NetworkData(interface_name="eth1")
    got = prepared_device(DEV, edits=edits, state={"vf": 3}, network_data=net)
    assert got == PreparedDevice(
        request="nic", pool="node-a", device="nic-1", edits=edits, state={"vf": 3}, network_data=net
    )
    assert prepared_device(DEV) == PreparedDevice(request="nic", pool="node-a", device="nic-1")


def test_read_attribute(tmp_path: Path) -> None:
    (tmp_path / "speed").write_text("400000\n", encoding="ascii")
    (tmp_path / "label").write_bytes(b"caf\xc3\xa9\n")
    assert read_attribute(tmp_path / "speed") == "400000"
    assert read_attribute(tmp_path / "label") is None  # not ASCII
    assert read_attribute(tmp_path / "missing") is None
