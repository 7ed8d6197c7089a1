"""drakit: a hook-driven framework for Kubernetes DRA node drivers.

The public API (``docs/compatibility.md``) is what this module exports plus
:mod:`drakit.hookspecs`, :mod:`drakit.models`, :mod:`drakit.config`, :mod:`drakit.context`,
:mod:`drakit.errors`, :mod:`drakit.sysfs`, :mod:`drakit.cpuset`, :mod:`drakit.strategies`,
:mod:`drakit.strategy_models`, :mod:`drakit.deviceclasses`, :mod:`drakit.admission` (what a
backend's pod mutator implements), :mod:`drakit.clikit` (what a ``drakit`` command is built
from), :mod:`drakit.simseam` (how production code finds simulators), and for tests
:mod:`drakit.testing` (the test kit for backends: simulated nodes, hosts, running nodes, the
contract suite; a pytest plugin, needs ``drakit[testing]``) and :mod:`drakit.sim` (simulated
hardware). Everything else may change without notice.
"""

from __future__ import annotations

from drakit.config import PluginSettings
from drakit.context import PluginContext
from drakit.errors import ConfigInvalid, PermanentError, RetryableError
from drakit.hookspecs import hookimpl

__all__ = [
    "ConfigInvalid",
    "PermanentError",
    "PluginContext",
    "PluginSettings",
    "RetryableError",
    "__version__",
    "hookimpl",
]

__version__ = "0.1.0"
