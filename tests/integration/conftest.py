"""Fixtures of the integration tests: a plugin host on a simulated node and its claim source.

Fixtures:
    host: a module-scoped :class:`~drakit.host.pluginhost.PluginHost` on the simulated
        ``h200-8gpu-8ainic`` node ``node-a`` with the ``cpu`` (CPUs 0-1 reserved),
        ``nvidia_gpu`` and ``amd_ainic`` backends, discovered once.
    claims: the API server's stand-in, an empty :class:`drakit.testing.ClaimStore`.

:func:`tests.integration.claims.claim` stores an allocated claim in it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.integration.claims import NODE

from drakit.host.inventory import build_inventory
from drakit.host.pluginhost import PluginHost
from drakit.host.settings import DrakitSettings
from drakit.host.startup import open_host
from drakit.testing import ClaimStore


@pytest.fixture(scope="module")
def host() -> Iterator[PluginHost]:
    """The plugin host on the simulated node (one per test module)."""
    settings = DrakitSettings(
        profile="h200-8gpu-8ainic",
        node_name=NODE,
        plugins={"cpu": {"reserved": "0-1"}, "nvidia_gpu": {}, "amd_ainic": {}},
    )
    with open_host(settings) as h:
        build_inventory(h)  # the profile discovers (each DriverState keeps its own Inventory)
        yield h


@pytest.fixture
def claims() -> ClaimStore:
    """An empty claim source.

    It hands out the stored claims themselves, no copy per GET: a JSON copy cannot hold the 1,500
    levels of the deeply nested config that the pipeline must reject by itself.
    """
    return ClaimStore(copy=False)
