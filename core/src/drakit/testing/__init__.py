"""drakit's test kit for backends: simulated nodes, hosts, running nodes and the contract.

Public API (see ``docs/testing.md``, "Testing your backend with drakit.testing"). The pytest
fixtures ``drakit_sim_node``, ``drakit_host`` and ``drakit_node`` come from
:mod:`drakit.testing.plugin`, which pytest loads by itself where drakit is installed. Needs
pytest (``pip install 'drakit[testing]'``).
"""

from __future__ import annotations

from drakit.testing.contract import BackendContract
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

__all__ = [
    "CLAIM_NAMESPACE",
    "BackendContract",
    "ClaimStore",
    "KubeletSide",
    "PrepareOutcome",
    "RunningNode",
    "SimHost",
    "SimNode",
    "allocated_claim",
    "build_sim_node",
    "open_host",
    "run_node",
]
