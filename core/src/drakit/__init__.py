"""drakit: a hook-driven framework for Kubernetes DRA node drivers.

The public API (``docs/compatibility.md``) is what this module exports plus
:mod:`drakit.hookspecs`, :mod:`drakit.models`, :mod:`drakit.config`, :mod:`drakit.context`,
:mod:`drakit.errors`, :mod:`drakit.statefiles` (a backend's state files), :mod:`drakit.sysfs`,
:mod:`drakit.cpuset`, :mod:`drakit.strategies`,
:mod:`drakit.strategy_models`, :mod:`drakit.deviceclasses`, :mod:`drakit.admission` (what a
backend's pod mutator implements), :mod:`drakit.clikit` (what a ``drakit`` command is built
from), :mod:`drakit.preparekit` (what every prepare hook does alike), :mod:`drakit.simseam`
(how production code finds simulators), and for tests :mod:`drakit.testing` (the test kit for
backends: simulated nodes, hosts, running nodes, the contract suite; a pytest plugin, needs
``drakit[testing]``) and :mod:`drakit.sim` (simulated hardware). Everything else may change
without notice.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType

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

MOVED_MODULES = {
    "drakit.cdi": "drakit.prepare.cdi",
    "drakit.checkpoint": "drakit.prepare.checkpoint",
    "drakit.cli": "drakit.commands.cli",
    "drakit.demo": "drakit.commands.demo",
    "drakit.explain_cmd": "drakit.commands.explain",
    "drakit.faults": "drakit.prepare.faults",
    "drakit.inventory": "drakit.host.inventory",
    "drakit.metrics": "drakit.node.metrics",
    "drakit.pluginhost": "drakit.host.pluginhost",
    "drakit.publisher": "drakit.publish.publisher",
    "drakit.runtime": "drakit.host.startup",
    "drakit.safefs": "drakit.prepare.safefs",
    "drakit.slicediff": "drakit.publish.diff",
    "drakit.slices": "drakit.publish.render",
    "drakit.state": "drakit.prepare.pipeline",
    "drakit.validate": "drakit.commands.validate",
}
"""Internal modules of drakit 0.1.0 that moved into lifecycle packages, old path -> new.

They were never public (``docs/compatibility.md``), but scripts outside the repository (the
side-by-side benchmark against the Go reference driver, for one) import them. Until drakit 0.2
the old path still imports, with a :class:`DeprecationWarning` that names the new one; the
names are the new module's own objects. ``drakit.node``, ``drakit.explain`` and
``drakit.admission`` are not here: those names are packages or public modules now.
"""


class _MovedModule(MetaPathFinder, Loader):
    """Imports an old module path as a view of the module it moved to."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """A spec for an old path, ``None`` for every other name."""
        return ModuleSpec(fullname, self) if fullname in MOVED_MODULES else None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        """The default module object."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Fill the old module from the new one, warning once per import."""
        new = MOVED_MODULES[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; the old path goes in drakit 0.2",
            DeprecationWarning,
            stacklevel=2,
        )
        target = importlib.import_module(new)
        module.__dict__.update(
            (k, v) for k, v in vars(target).items() if not k.startswith("__") or k == "__all__"
        )
        module.__getattr__ = lambda name: getattr(target, name)  # type: ignore[method-assign]


if not any(isinstance(f, _MovedModule) for f in sys.meta_path):
    sys.meta_path.append(_MovedModule())
