"""drakit's test kit for backends: simulated nodes, hosts, running nodes and the contract.

Public API (see ``docs/testing.md``, "Testing your backend with drakit.testing"). The pytest
fixtures ``drakit_sim_node``, ``drakit_host``, ``drakit_node`` and ``drakit_gates_off`` come from
:mod:`drakit.testing.plugin`, which pytest loads by itself where drakit is installed. Needs
pytest (``pip install 'drakit[testing]'``).

The names are imported on first use, so that loading the pytest plugin (every pytest run in an
environment with drakit) does not import the node, the gRPC layer and the Kubernetes client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drakit.testing.allocation import Allocation, allocate
    from drakit.testing.contract import BackendContract
    from drakit.testing.dropped import DroppedFields, fields_dropped
    from drakit.testing.faults import StateFaults, state_faults
    from drakit.testing.nodes import (
        CLAIM_NAMESPACE,
        ClaimStore,
        KubeletSide,
        PrepareOutcome,
        RunningNode,
        SimHost,
        SimNode,
        allocated_claim,
        build_sim_node,
        open_host,
        run_node,
    )
    from drakit.testing.published import Published, PublishedDevice

__all__ = [
    "CLAIM_NAMESPACE",
    "Allocation",
    "BackendContract",
    "ClaimStore",
    "DroppedFields",
    "KubeletSide",
    "PrepareOutcome",
    "Published",
    "PublishedDevice",
    "RunningNode",
    "SimHost",
    "SimNode",
    "StateFaults",
    "allocate",
    "allocated_claim",
    "build_sim_node",
    "fields_dropped",
    "open_host",
    "run_node",
    "state_faults",
]

_HOME = {name: "drakit.testing.nodes" for name in __all__} | {
    "BackendContract": "drakit.testing.contract",
    "Allocation": "drakit.testing.allocation",
    "allocate": "drakit.testing.allocation",
    "Published": "drakit.testing.published",
    "PublishedDevice": "drakit.testing.published",
    "DroppedFields": "drakit.testing.dropped",
    "fields_dropped": "drakit.testing.dropped",
    "StateFaults": "drakit.testing.faults",
    "state_faults": "drakit.testing.faults",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'drakit.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
