"""drakit's pytest plugin (entry point ``pytest11: drakit``): fixtures for a backend's tests.

* ``drakit_sim_node(profile_or_spec, **kw) -> SimNode``: a simulated node in a fresh
  memory-backed directory (``/dev/shm`` when there is one), removed after the test; keyword
  arguments go to :func:`drakit.testing.build_sim_node` (``node_name``).
* ``drakit_host(config, node=None) -> SimHost``: a plugin host on ``node`` (default: a node
  built from ``drakit.sim.DEFAULT_PROFILE``), closed after the test.
* ``drakit_node(config, node=None) -> RunningNode``: an in-process node serving the kubelet
  sockets, stopped after the test.
* ``drakit_gates_off(host, *gates) -> DroppedFields``: which of ``host``'s published fields an
  API server with those feature gates off drops; the host's backends are told, as on a node.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pytest

if TYPE_CHECKING:
    from drakit.sim import MachineSpec
    from drakit.testing.dropped import DroppedFields
    from drakit.testing.nodes import RunningNode, SimHost, SimNode

# drakit.testing.nodes (the node, gRPC, the Kubernetes client) is imported by the fixtures, when
# a test uses one: pytest loads this plugin in every run where drakit is installed.

__all__ = [
    "GatesOff",
    "HostFactory",
    "NodeFactory",
    "SimNodeFactory",
    "drakit_gates_off",
    "drakit_host",
    "drakit_node",
    "drakit_sim_node",
]


class SimNodeFactory(Protocol):
    """The ``drakit_sim_node`` fixture."""

    def __call__(self, profile: str | MachineSpec, *, node_name: str = ...) -> SimNode:
        """Build a simulated node from a profile name or spec."""
        ...


class HostFactory(Protocol):
    """The ``drakit_host`` fixture."""

    def __call__(self, config: Mapping[str, Any], node: SimNode | None = None) -> SimHost:
        """Open a plugin host for ``config`` on ``node``."""
        ...


class NodeFactory(Protocol):
    """The ``drakit_node`` fixture."""

    def __call__(self, config: Mapping[str, Any], node: SimNode | None = None) -> RunningNode:
        """Start a node for ``config`` on ``node``."""
        ...


@pytest.fixture
def drakit_sim_node() -> Iterator[SimNodeFactory]:
    """``drakit_sim_node(profile_or_spec, node_name="node-1")``: a simulated node for this test."""
    from drakit.sim import fast_tmp
    from drakit.testing.nodes import build_sim_node

    made: list[Path] = []

    def build(profile: str | MachineSpec, *, node_name: str = "node-1") -> SimNode:
        base = Path(tempfile.mkdtemp(prefix="drakit-node-", dir=fast_tmp()))
        made.append(base)
        return build_sim_node(profile, base / "root", node_name=node_name)

    yield build
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def drakit_host(drakit_sim_node: SimNodeFactory) -> Iterator[HostFactory]:
    """``drakit_host(config, node=None)``: a plugin host, closed after the test."""
    from drakit.sim import DEFAULT_PROFILE
    from drakit.testing.nodes import open_host

    with ExitStack() as stack:

        def open_(config: Mapping[str, Any], node: SimNode | None = None) -> SimHost:
            return stack.enter_context(open_host(config, node or drakit_sim_node(DEFAULT_PROFILE)))

        yield open_


@pytest.fixture
def drakit_node(drakit_sim_node: SimNodeFactory) -> Iterator[NodeFactory]:
    """``drakit_node(config, node=None)``: a running node, stopped after the test."""
    from drakit.sim import DEFAULT_PROFILE, fast_tmp
    from drakit.testing.nodes import run_node

    with ExitStack() as stack:
        dirs: list[Path] = []

        def start(config: Mapping[str, Any], node: SimNode | None = None) -> RunningNode:
            state = Path(tempfile.mkdtemp(prefix="drakit-state-", dir=fast_tmp()))
            dirs.append(state)
            sim = node or drakit_sim_node(DEFAULT_PROFILE)
            return stack.enter_context(run_node(config, sim, state_dir=state))

        yield start
        stack.close()
        for path in dirs:
            shutil.rmtree(path, ignore_errors=True)


class GatesOff(Protocol):
    """The ``drakit_gates_off`` fixture."""

    def __call__(self, host: SimHost, *gates: str) -> DroppedFields:
        """What an API server with ``gates`` off drops of ``host``'s slices; its backends told."""
        ...


@pytest.fixture
def drakit_gates_off() -> Iterator[GatesOff]:
    """``drakit_gates_off(host, "DRAPartitionableDevices")``: the fields such a server drops.

    Returns the :class:`~drakit.testing.DroppedFields` report (field paths, the gate of each,
    the names per driver) and tells the host's backends, as a node does: their
    ``PluginContext.dropped_fields()`` returns the names from the next discovery on. Every host
    it was given is told nothing is dropped any more at the end of the test.
    """
    hosts: list[SimHost] = []

    def gates_off(host: SimHost, *gates: str) -> DroppedFields:
        hosts.append(host)
        return host.drop_fields(gates)

    yield gates_off
    for host in hosts:
        host.host.dropped_fields = None
