"""The contract suite a backend runs against itself on its own simulated profile.

Subclass :class:`BackendContract` in a test module (the class name must start with ``Test``)::

    from drakit.testing import BackendContract

    class TestAcmeContract(BackendContract):
        plugin = "acme_fpga"
        profile = "acme-4fpga"
        config = {}
        bad_configs = [{"apiVersion": "fpga.acme.example.com/v1", "kind": "FpgaConfig",
                        "bitstream": 7}]

Each test of the class checks one promise every backend makes to drakit; a backend that finds
nothing on its profile fails the first one instead of passing the others vacuously. One
simulated node, one plugin host and one running node are shared by the class's tests.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import pytest
from pydantic import ValidationError

from drakit.allocator import ResourceSlice
from drakit.errors import ConfigInvalid
from drakit.host.discovery import Discovered
from drakit.host.startup import fast_tmp
from drakit.models import CdiEdits, DeviceKey
from drakit.publish.render import check_pool, render_checked
from drakit.sim import MachineSpec
from drakit.testing.allocation import allocate
from drakit.testing.nodes import (
    RunningNode,
    SimHost,
    SimNode,
    allocated_claim,
    build_sim_node,
    open_host,
    run_node,
)

__all__ = ["BackendContract"]

_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _device_results(
    slices: Sequence[Mapping[str, Any]], driver: str, keys: Sequence[DeviceKey]
) -> dict[DeviceKey, dict[str, Any]]:
    """An allocation result per device, as the scheduler writes it (shared devices too).

    A device that allows multiple allocations gets a ``shareID`` and consumes each capacity's
    request-policy default (or the whole capacity without one).
    """
    wanted = set(keys)
    out: dict[DeviceKey, dict[str, Any]] = {}
    for s in slices:
        spec = s["spec"]
        if spec["driver"] != driver:
            continue
        pool = spec["pool"]["name"]
        for dev in spec.get("devices") or []:
            key = DeviceKey(driver=driver, pool=pool, device=dev["name"])
            if key not in wanted:
                continue
            result: dict[str, Any] = {}
            if dev.get("allowMultipleAllocations"):
                result["shareID"] = str(uuid.uuid4())
                consumed = {
                    name: (cap.get("requestPolicy") or {}).get("default") or cap["value"]
                    for name, cap in (dev.get("capacity") or {}).items()
                }
                if consumed:
                    result["consumedCapacity"] = consumed
            out[key] = result
    return out


def _attributes(slices: Sequence[Mapping[str, Any]], key: DeviceKey) -> dict[str, Any]:
    """The device's attributes as its slice publishes them."""
    for s in slices:
        spec = s["spec"]
        if spec["driver"] == key.driver and spec["pool"]["name"] == key.pool:
            for dev in spec.get("devices") or []:
                if dev["name"] == key.device:
                    attributes: dict[str, Any] = dev.get("attributes") or {}
                    return attributes
    raise AssertionError(f"{key} is not in the node's slices")


PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
_MAX_PARTS_CHECKED = 8


def _same_function_groups(
    slices: Sequence[Mapping[str, Any]], driver: str
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """``(pool, pciBusID)`` -> the driver's devices of one PCI function (a GPU, its slices)."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for s in slices:
        spec = s["spec"]
        if spec["driver"] != driver:
            continue
        for dev in spec.get("devices") or []:
            bdf = ((dev.get("attributes") or {}).get(PCI_BUS_ID) or {}).get("string")
            if bdf:
                out.setdefault((spec["pool"]["name"], bdf), []).append(dev)
    return {k: v for k, v in out.items() if len(v) > 1}


def _draw(device: Mapping[str, Any], counter_set: str) -> int:
    """How many of ``counter_set``'s counters ``device`` draws from (0: none)."""
    return sum(
        len(c.get("counters") or {})
        for c in device.get("consumesCounters") or []
        if c["counterSet"] == counter_set
    )


def _only(
    slices: Sequence[Mapping[str, Any]], driver: str, pool: str, names: set[str]
) -> list[dict[str, Any]]:
    """``slices`` with the driver's pool reduced to the devices ``names`` (counters kept)."""
    out = []
    for s in slices:
        spec = s["spec"]
        if spec["driver"] == driver and spec["pool"]["name"] == pool:
            devices = [d for d in spec.get("devices") or [] if d["name"] in names]
            out.append({**s, "spec": {**spec, "devices": devices}})
        else:
            out.append(dict(s))
    return out


def _check_partitions(slices: Sequence[Mapping[str, Any]], driver: str, node: str) -> None:
    """Partitions of one PCI function never go with the device they are part of.

    Devices of one PCI function (same ``pciBusID`` in a pool: a GPU and its MIG slices) must
    share a counter set, and the one that draws on most of it never goes with any other: with
    it held, the scheduler (:func:`drakit.testing.allocate`, over the pool reduced to the two
    devices) must not allocate a partition; with a partition held, not the whole device. A
    backend that publishes a partition without counters, or a whole device that draws on none
    of its partitions' counters, fails here.
    """
    for (pool, bdf), group in sorted(_same_function_groups(slices, driver).items()):
        sets = set.intersection(
            *({c["counterSet"] for c in d.get("consumesCounters") or []} for d in group)
        )
        names = [d["name"] for d in group]
        assert sets, (
            f"devices {names[:4]} are one PCI function ({PCI_BUS_ID} {bdf}) but draw on no "
            "common counter set: nothing keeps them from being allocated together"
        )
        counter_set = sorted(sets)[0]
        whole = max(group, key=lambda d: (_draw(d, counter_set), -len(d["name"])))
        if whole.get("allowMultipleAllocations"):
            continue
        for part in [d for d in group if d is not whole][:_MAX_PARTS_CHECKED]:
            pair = _only(slices, driver, pool, {whole["name"], part["name"]})
            for held, wanted in ((whole, part), (part, whole)):
                holder = allocated_claim(
                    f"holder-{held['name']}", [("r", driver, held["name"])], pool=pool
                )
                asked = {
                    "metadata": {"name": "asked"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "r", "exactly": {"deviceClassName": driver}}]
                        }
                    },
                }
                out = allocate([asked], pair, node=node, allocated=[holder])
                assert not out.fits, (
                    f"{wanted['name']} was allocatable while {held['name']} was held (one PCI "
                    f"function, {bdf}, counter set {counter_set!r}): {out.results}"
                )


class _Target(NamedTuple):
    running: RunningNode
    devices: list[DeviceKey]
    driver: str


class BackendContract:
    """Contract tests for one backend; subclass it and set the class attributes.

    Attributes:
        plugin: the backend's entry point name (``drakit.plugins`` group).
        profile: the simulated profile (a name, or a :class:`drakit.sim.MachineSpec`) on which
            the backend finds devices.
        config: the backend's configuration section (``plugins.<plugin>``).
        other_plugins: other backends to load with it, by name with their sections (a backend
            that composes devices from others' needs them).
        bad_configs: opaque config objects (``parameters``: ``apiVersion``, ``kind``, fields)
            the backend must refuse with an error naming a field.
        node_name: the simulated node's name (and its default pool's).
    """

    plugin: ClassVar[str]
    profile: ClassVar[str | MachineSpec]
    config: ClassVar[Mapping[str, Any]] = {}
    other_plugins: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    bad_configs: ClassVar[Sequence[Mapping[str, Any]]] = ()
    node_name: ClassVar[str] = "node-1"

    # -- shared fixtures (one node per contract class) -------------------------------------------

    @classmethod
    def drakit_config(cls) -> dict[str, Any]:
        """The drakit configuration the contract runs: the plugin, then ``other_plugins``."""
        plugins = {cls.plugin: dict(cls.config)}
        plugins.update({k: dict(v) for k, v in cls.other_plugins.items() if k != cls.plugin})
        return {"plugins": plugins}

    @pytest.fixture(scope="class")
    @classmethod
    def contract_dir(cls) -> Iterator[Path]:
        """A memory-backed directory for the class's node, removed afterwards."""
        path = Path(tempfile.mkdtemp(prefix="drakit-contract-", dir=fast_tmp()))
        yield path
        shutil.rmtree(path, ignore_errors=True)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_node(cls, contract_dir: Path) -> SimNode:
        """The simulated node built from :attr:`profile`."""
        return build_sim_node(cls.profile, contract_dir / "root", node_name=cls.node_name)

    @classmethod
    def simulation(cls, node: SimNode) -> AbstractContextManager[object]:
        """Stand-ins that must run beside the simulated tree while the contract runs.

        Override it when the simulated hardware needs a live part (for example a simulated
        kernel that creates VFs when ``sriov_numvfs`` is written); the default runs nothing.
        """
        return nullcontext()

    @pytest.fixture(scope="class")
    @classmethod
    def contract_simulation(cls, contract_node: SimNode) -> Iterator[SimNode]:
        """The simulated node with :meth:`simulation` running."""
        with cls.simulation(contract_node):
            yield contract_node

    @pytest.fixture(scope="class")
    @classmethod
    def contract_host(cls, contract_simulation: SimNode) -> Iterator[SimHost]:
        """A plugin host with the contract's configuration."""
        with open_host(cls.drakit_config(), contract_simulation) as host:
            yield host

    @pytest.fixture(scope="class")
    @classmethod
    def contract_discovered(cls, contract_host: SimHost) -> Discovered:
        """One discovery round on the contract's host."""
        return contract_host.discover()

    @pytest.fixture(scope="class")
    @classmethod
    def contract_devices(cls, contract_discovered: Discovered) -> list[DeviceKey]:
        """The devices the plugin under test discovered or composed."""
        return [k for k, owner in contract_discovered.owners.items() if owner == cls.plugin]

    @pytest.fixture(scope="class")
    @classmethod
    def contract_running(cls, contract_node: SimNode, contract_dir: Path) -> Iterator[RunningNode]:
        """A running node with the contract's configuration, serving the kubelet sockets."""
        config = {**cls.drakit_config(), "device_metadata": True}  # checked for every device
        with run_node(config, contract_node, state_dir=contract_dir / "node") as n:
            yield n

    @pytest.fixture(scope="class")
    @classmethod
    def contract_driver(cls, contract_host: SimHost) -> str:
        """The plugin's DRA driver name."""
        return contract_host.driver_of(cls.plugin)

    @pytest.fixture(scope="class")
    @classmethod
    def contract_target(
        cls, contract_running: RunningNode, contract_devices: list[DeviceKey], contract_driver: str
    ) -> _Target:
        """The running node, the plugin's devices and its driver: what the prepare tests use."""
        return _Target(contract_running, contract_devices, contract_driver)

    def _require_devices(self, devices: Sequence[DeviceKey]) -> None:
        if not devices:
            pytest.fail(
                f"plugin {self.plugin!r} discovered no devices on profile {self.profile_name()!r}:"
                " a contract run needs a profile with the backend's hardware (set `profile`)",
                pytrace=False,
            )

    @classmethod
    def profile_name(cls) -> str:
        """The name of :attr:`profile`."""
        return cls.profile if isinstance(cls.profile, str) else cls.profile.name

    def _first_device_claim(
        self, target: _Target, *, name: str
    ) -> tuple[RunningNode, dict[str, Any]]:
        """The target's node and an allocated claim ``name`` of its first device."""
        running, devices, driver = target
        self._require_devices(devices)
        return running, self._claim(running, driver, devices[:1], name=name)

    def _claim(
        self,
        running: RunningNode,
        driver: str,
        keys: Sequence[DeviceKey],
        *,
        name: str,
        config: Sequence[dict[str, Any]] = (),
        slices: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """An allocated claim of ``keys`` (one request each), stored in the node's source.

        ``slices``: the node's rendered slices (default: rendered now).
        """
        shares = _device_results(running.slices() if slices is None else slices, driver, keys)
        pools = {k.pool for k in keys}
        claim = allocated_claim(
            name,
            [(f"r{i}", driver, k.device) for i, k in enumerate(keys)],
            pool=next(iter(pools)) if len(pools) == 1 else self.node_name,
            config=config,
        )
        for result, key in zip(
            claim["status"]["allocation"]["devices"]["results"], keys, strict=True
        ):
            result["pool"] = key.pool
            result.update(shares.get(key, {}))
        running.claims.add(claim)
        return claim

    # -- the contract ----------------------------------------------------------------------------

    def test_discovery_finds_devices(self, contract_devices: list[DeviceKey]) -> None:
        """The backend finds devices on its profile (none is a failure, not a pass)."""
        self._require_devices(contract_devices)

    def test_hooks_are_marked_and_settings_default(self, contract_host: SimHost) -> None:
        """Every ``drakit_*`` method is a hook implementation; ``plugins: [name]`` enables it."""
        obj = contract_host.backends[self.plugin]
        implemented = set(contract_host.hook_implementations(self.plugin))
        unmarked = sorted({n for n in dir(obj) if n.startswith("drakit_")} - implemented)
        assert not unmarked, f"{self.plugin}: {unmarked} lack @hookimpl (they are never called)"
        model = getattr(type(obj), "settings_model", None)
        if model is not None:
            model.model_validate({})  # every setting has a default

    def test_devices_render_into_valid_slices(
        self, contract_host: SimHost, contract_devices: list[DeviceKey], contract_driver: str
    ) -> None:
        """Every device passes drakit's API checks and renders into valid ResourceSlices.

        And partitions of one PCI function never go with their whole device
        (:func:`_check_partitions`: a GPU and its MIG slices draw on one counter set, and the
        scheduler never allocates the GPU with a slice of it).
        """
        self._require_devices(contract_devices)
        inv = contract_host.inventory()
        rendered: list[dict[str, Any]] = []
        problems: list[str] = []
        for pool in inv.pools:
            if pool.driver != contract_driver:
                continue
            kept, errors = check_pool(pool)
            problems += [str(e) for e in errors]
            rendered += render_checked(kept)
        assert not problems, "devices the API server would reject:\n" + "\n".join(problems)
        for body in rendered:
            ResourceSlice.model_validate(body)
        published = [
            DeviceKey(driver=contract_driver, pool=s["spec"]["pool"]["name"], device=d["name"])
            for s in rendered
            for d in s["spec"].get("devices") or []
        ]
        missing = sorted(str(k) for k in set(contract_devices) - set(published))
        assert not missing, f"devices not published: {missing}"
        assert len(published) == len(set(published)), "a device is published twice"
        _check_partitions(rendered, contract_driver, self.node_name)

    def test_every_device_prepares_and_unprepares(self, contract_target: _Target) -> None:
        """Each device prepares alone over the kubelet socket, then unprepares.

        Its CDI edits are in the claim's spec, its device metadata file (KEP-5304) carries the
        attributes the node publishes for it, and unprepare leaves neither.
        """
        contract_running, contract_devices, contract_driver = contract_target
        self._require_devices(contract_devices)
        slices = contract_running.slices()
        for i, key in enumerate(contract_devices):
            claim = self._claim(
                contract_running, contract_driver, [key], name=f"contract-{i}", slices=slices
            )
            out = contract_running.kubelet.prepare(claim)
            assert out.error is None, f"prepare of {key} failed: {out.error}"
            assert [(d.pool, d.device) for d in out.devices] == [(key.pool, key.device)], (
                f"prepare of {key} reported {out.devices}"
            )
            assert out.devices[0].requests == ["r0"]
            edits = out.cdi_edits()
            assert set(edits) == set(out.cdi_ids), (
                f"CDI IDs of {key} without a device in the CDI specs: "
                f"{sorted(set(out.cdi_ids) - set(edits))}"
            )
            metadata = out.device_metadata()
            assert len(metadata) == 1, f"{key}: device metadata files mounted: {sorted(metadata)}"
            [(inside, docs)] = metadata.items()
            [meta] = docs[0]["requests"][0]["devices"]
            assert meta.get("attributes", {}) == _attributes(slices, key), (
                f"{key}: the device metadata at {inside} does not carry the published attributes"
            )
            hosts = {
                m["hostPath"]
                for e in edits.values()
                for m in e.get("mounts") or []
                if m["containerPath"] == inside
            }
            err = contract_running.kubelet.unprepare(claim)
            assert err is None, f"unprepare of {key} failed: {err}"
            assert out.spec_files() == [], f"CDI spec of {key} left after unprepare"
            left = sorted(h for h in hosts if Path(h).exists())
            assert not left, f"device metadata of {key} left after unprepare: {left}"
            contract_running.claims.remove(claim)

    def test_prepare_is_idempotent(self, contract_target: _Target) -> None:
        """A repeated prepare answers the same; a repeated unprepare succeeds."""
        contract_running, claim = self._first_device_claim(contract_target, name="contract-twice")
        first = contract_running.kubelet.prepare(claim)
        assert first.error is None, first.error
        second = contract_running.kubelet.prepare(claim)
        assert second.error is None, second.error
        assert second.devices == first.devices
        assert second.cdi_edits() == first.cdi_edits()
        assert contract_running.kubelet.unprepare(claim) is None
        assert contract_running.kubelet.unprepare(claim) is None
        contract_running.claims.remove(claim)

    def test_unprepare_of_an_unknown_claim_succeeds(
        self, contract_running: RunningNode, contract_driver: str
    ) -> None:
        """The kubelet may unprepare a claim the node never prepared (after a restart)."""
        claim = allocated_claim(
            "contract-unknown", [("r0", contract_driver, "never-prepared")], pool=self.node_name
        )
        assert contract_running.kubelet.unprepare(claim) is None

    def test_health_names_only_its_own_devices(self, contract_target: _Target) -> None:
        """Health reports name devices of this backend only (when it reports health)."""
        contract_running, contract_devices, contract_driver = contract_target
        self._require_devices(contract_devices)
        if "drakit_device_health" not in contract_running.host.hook_implementations(self.plugin):
            pytest.skip(f"plugin {self.plugin!r} does not implement drakit_device_health")
        reported = contract_running.health().get(self.plugin, [])
        now = contract_running.host.discover()  # the devices as they are now
        owned = {k for k, owner in now.owners.items() if owner == self.plugin}
        strangers = sorted(
            str(key)
            for h in reported
            if (key := DeviceKey(driver=contract_driver, pool=h.pool, device=h.device)) not in owned
        )
        assert not strangers, f"health names devices that are not {self.plugin!r}'s: {strangers}"

    def test_bad_configs_are_refused_naming_a_field(
        self, contract_host: SimHost, contract_target: _Target
    ) -> None:
        """Each of :attr:`bad_configs` fails validation and fails the claim carrying it, alone."""
        contract_running, contract_devices, contract_driver = contract_target
        if not self.bad_configs:
            pytest.skip("no bad_configs declared")
        self._require_devices(contract_devices)
        for i, params in enumerate(self.bad_configs):
            with pytest.raises(ConfigInvalid) as caught:
                contract_host.parse_config(contract_driver, params)
            fields = [path for path, _ in caught.value.errors if path]
            assert fields, f"bad_configs[{i}] was refused without naming a field: {caught.value}"
            entry = {
                "requests": ["r0"],
                "opaque": {"driver": contract_driver, "parameters": dict(params)},
            }
            claim = self._claim(
                contract_running,
                contract_driver,
                contract_devices[:1],
                name=f"contract-bad-{i}",
                config=[entry],
            )
            out = contract_running.kubelet.prepare(claim)
            assert out.error, f"a claim with bad_configs[{i}] prepared: {out.devices}"
            leaf = fields[0].rsplit(".", 1)[-1]
            assert leaf in out.error, f"the claim's error does not name {leaf!r}: {out.error}"
            assert out.spec_files() == []
            contract_running.claims.remove(claim)

    def test_cdi_edits_are_typed_and_name_simulated_nodes(self, contract_target: _Target) -> None:
        """CDI edits read back as ``CdiEdits``; device nodes are in the simulated ``dev/``.

        Every device node the runtime would read from the host must be in the simulated
        node's ``dev/``. Core sets ``hostPath`` under the device root (the simulated root
        here) and refuses a missing node, so this fails a backend that hard-codes a host path
        (``/dev/...`` of the machine running the tests) or whose profile lacks the nodes its
        prepare names.
        """
        running, devices, driver = contract_target
        self._require_devices(devices)
        slices = running.slices()
        dev = running.sim.root.resolve() / "dev"
        for i, key in enumerate(devices):
            claim = self._claim(running, driver, [key], name=f"contract-nodes-{i}", slices=slices)
            out = running.kubelet.prepare(claim)
            assert out.error is None, f"prepare of {key} failed: {out.error}"
            try:
                for cdi_id, body in out.cdi_edits().items():
                    try:
                        edits = CdiEdits.model_validate(body)
                    except ValidationError as e:
                        pytest.fail(f"CDI edits of {key} ({cdi_id}) are not valid: {e}")
                    for n in edits.device_nodes:
                        if n.type is not None and (n.major or n.type == "p"):
                            continue  # the runtime makes it from its numbers, not the host's
                        host = Path(n.host_path or n.path)
                        assert host.is_relative_to(dev), (
                            f"device node {n.path} of {key}: its host path {host} is not in the "
                            f"simulated node's {dev}: leave host_path unset (core puts it under "
                            "the device root) and make the node in the profile "
                            "(drakit.sim.make_device_node, in a SimPart)"
                        )
                        assert os.path.lexists(host), f"device node {host} of {key} is missing"
            finally:
                assert running.kubelet.unprepare(claim) is None
                running.claims.remove(claim)

    def test_cdi_files_are_not_writable_by_others(self, contract_target: _Target) -> None:
        """CDI specs (and their directory) are writable by their owner only, and stay inside it."""
        contract_running, claim = self._first_device_claim(contract_target, name="contract-modes")
        out = contract_running.kubelet.prepare(claim)
        assert out.error is None, out.error
        try:
            files = out.spec_files()
            assert files, "prepare wrote no CDI spec"
            cdi_dir = contract_running.cdi_dir
            for path in [cdi_dir, *files]:
                mode = path.lstat().st_mode
                assert not mode & _GROUP_OTHER_WRITE, f"{path} is mode {stat.filemode(mode)}"
                assert path.resolve().is_relative_to(cdi_dir.resolve())
            for path in contract_running.state_dir.rglob("*"):
                mode = path.lstat().st_mode
                assert not mode & _GROUP_OTHER_WRITE, f"{path} is mode {stat.filemode(mode)}"
        finally:
            assert contract_running.kubelet.unprepare(claim) is None
            contract_running.claims.remove(claim)
