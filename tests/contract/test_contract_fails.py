"""The contract suite fails a backend that breaks it (run with the real pytest, ``pytester``).

Each case installs a tiny backend through a throwaway distribution (``drakit.plugins`` entry
point, as a vendor's package is installed), writes a test module subclassing
:class:`drakit.testing.BackendContract` for it, and runs pytest on that module in process.
A correct backend passes, so the failures below are the contract's, not the harness's.
"""

from __future__ import annotations

import textwrap

import pytest
from tests.conftest import EntryPoints

pytest_plugins = ["pytester"]

DRIVER = "kit.example.com"

BACKEND = """
from datetime import UTC, datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from drakit import ConfigInvalid, PluginSettings, hookimpl
from drakit.models import CdiEdits, Device, DeviceHealth, DeviceInventory, PreparedDevice

API = "kit.example.com/v1"


class KitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: str = "plain"


class Plugin:
    settings_model: ClassVar[type[PluginSettings]] = PluginSettings
    default_driver: ClassVar[str] = {driver!r}
    DEVICES = {devices}
    HEALTH_EXTRA = {health_extra!r}
    STRICT = {strict!r}
    NODES = {nodes!r}

    def __init__(self, context):
        self.context = context

    @hookimpl
    def drakit_discover_devices(self, node):
        return DeviceInventory(devices=tuple(Device(**d) for d in self.DEVICES))

    @hookimpl
    def drakit_parse_config(self, api_version, kind, parameters):
        if (api_version, kind) != (API, "KitConfig"):
            return None
        if not self.STRICT:
            return KitConfig.model_construct(**parameters)
        body = {{k: v for k, v in parameters.items() if k not in ("apiVersion", "kind")}}
        try:
            return KitConfig.model_validate(body)
        except Exception as e:
            raise ConfigInvalid([(err["loc"][0], err["msg"]) for err in e.errors()]) from None

    @hookimpl
    def drakit_prepare_devices(self, claim):
        return [
            PreparedDevice(
                request=d.request,
                pool=d.pool,
                device=d.device,
                edits=CdiEdits(env=(f"KIT_DEVICE={{d.device}}",), device_nodes=tuple(self.NODES)),
            )
            for d in claim.devices
        ]

    @hookimpl
    def drakit_unprepare_devices(self, claim_uid, prepared):
        return True

    @hookimpl
    def drakit_device_health(self, node):
        now = datetime.now(UTC)
        names = [d["name"] for d in self.DEVICES] + list(self.HEALTH_EXTRA)
        return [
            DeviceHealth(pool=node.name, device=n, health="Healthy", last_updated=now)
            for n in names
        ]
"""

CONTRACT = """
from drakit.testing import BackendContract


class TestKitContract(BackendContract):
    plugin = {plugin!r}
    profile = "minimal-1s"
    bad_configs = [{{"apiVersion": "kit.example.com/v1", "kind": "KitConfig", "mode": 3}}]
"""

TWO_CARDS: list[dict[str, object]] = [{"name": "card-0"}, {"name": "card-1"}]


def run_contract(
    pytester: pytest.Pytester,
    entry_points: EntryPoints,
    *,
    devices: list[dict[str, object]] = TWO_CARDS,
    health_extra: tuple[str, ...] = (),
    strict: bool = True,
    nodes: tuple[dict[str, str], ...] = (),
    messages: dict[str, str] | None = None,
) -> dict[str, str]:
    """Install the backend, run the contract on it; test name -> outcome.

    ``nodes``: the device nodes its prepare hands out (as dicts); ``messages`` receives each
    failed test's report.
    """
    source = BACKEND.format(
        driver=DRIVER,
        devices=devices,
        health_extra=list(health_extra),
        strict=strict,
        nodes=list(nodes),
    )
    entry_points.install("drakit.plugins", "kit_card", source)
    pytester.makepyfile(test_kit=textwrap.dedent(CONTRACT.format(plugin="kit_card")))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA")
    outcomes: dict[str, str] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.when == "call" or report.outcome != "passed":
            outcomes[name] = "skipped" if report.skipped else report.outcome
            if messages is not None and report.failed:
                messages[name] = report.longreprtext
    return outcomes


def test_a_correct_backend_passes(pytester: pytest.Pytester, entry_points: EntryPoints) -> None:
    outcomes = run_contract(pytester, entry_points)
    assert outcomes, "the contract collected no tests"
    assert set(outcomes.values()) == {"passed"}, outcomes


def test_a_backend_that_finds_nothing_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    outcomes = run_contract(pytester, entry_points, devices=[])
    # only the checks that need no device pass; every other one fails instead of passing empty
    independent = {
        "test_hooks_are_marked_and_settings_default",
        "test_unprepare_of_an_unknown_claim_succeeds",
    }
    assert {k for k, v in outcomes.items() if v == "passed"} == independent, outcomes
    assert len(outcomes) > len(independent)
    assert {v for k, v in outcomes.items() if k not in independent} == {"failed"}, outcomes


def test_a_device_the_api_rejects_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    # an attribute string longer than the API's 64 characters
    outcomes = run_contract(
        pytester, entry_points, devices=[{"name": "card-0", "attributes": {"model": "x" * 65}}]
    )
    assert outcomes["test_devices_render_into_valid_slices"] == "failed"


def test_health_of_a_stranger_device_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    outcomes = run_contract(pytester, entry_points, health_extra=("not-mine",))
    assert outcomes["test_health_names_only_its_own_devices"] == "failed"
    assert outcomes["test_discovery_finds_devices"] == "passed"


def test_a_backend_that_accepts_a_bad_config_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    outcomes = run_contract(pytester, entry_points, strict=False)
    assert outcomes["test_bad_configs_are_refused_naming_a_field"] == "failed"
    assert outcomes["test_discovery_finds_devices"] == "passed"


def test_a_device_node_from_the_test_machine_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    # a hard-coded hostPath of the machine running the tests, not of the simulated node
    messages: dict[str, str] = {}
    outcomes = run_contract(
        pytester,
        entry_points,
        nodes=({"path": "/dev/kit0", "hostPath": "/dev/null"},),
        messages=messages,
    )
    assert outcomes["test_cdi_edits_are_typed_and_name_simulated_nodes"] == "failed"
    assert "leave host_path unset" in messages["test_cdi_edits_are_typed_and_name_simulated_nodes"]
    assert outcomes["test_every_device_prepares_and_unprepares"] == "passed"


def test_a_misspelt_device_node_key_fails_naming_it(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    messages: dict[str, str] = {}
    outcomes = run_contract(
        pytester, entry_points, nodes=({"path": "/dev/kit0", "hostpath": "/x"},), messages=messages
    )
    assert outcomes["test_every_device_prepares_and_unprepares"] == "failed"
    assert "hostpath" in messages["test_every_device_prepares_and_unprepares"]
    assert outcomes["test_discovery_finds_devices"] == "passed"


def test_a_device_node_missing_on_the_simulated_node_fails(
    pytester: pytest.Pytester, entry_points: EntryPoints
) -> None:
    messages: dict[str, str] = {}
    outcomes = run_contract(
        pytester, entry_points, nodes=({"path": "/dev/kit0"},), messages=messages
    )
    assert outcomes["test_every_device_prepares_and_unprepares"] == "failed"
    message = messages["test_every_device_prepares_and_unprepares"]
    assert "device node /dev/kit0" in message
    assert "is missing on the host" in message
