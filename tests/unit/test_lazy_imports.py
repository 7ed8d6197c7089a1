"""What a node process loads: heavy libraries only where it needs them.

Each is tens of MiB resident in every node (``benchmarks/rss.py`` measures the process): the
Kubernetes client only where the node talks to a cluster (``drakit.kube``), the CEL library
(which loads prompt_toolkit) only when a CEL expression is evaluated; and lighter ones a node
need not carry, such as packaging's specifiers (~0.45 MiB) only for a plugin that declares
``hook_api``. Checked in a fresh interpreter, since this test process has imported everything
already.
"""

from __future__ import annotations

import subprocess
import sys

_NODE_MODULES = (
    "drakit.node.daemon",
    "drakit.prepare.pipeline",
    "drakit.publish.publisher",
    "drakit.webhook.admission",
    "drakit_composite.admission",
    "drakit_cpu.plugin",
    "drakit_nvidia_gpu.plugin",
    "drakit_amd_ainic.plugin",
    "drakit_composite.plugin",
)


def _loaded_after(
    imports: tuple[str, ...], candidates: tuple[str, ...], *, then: str = ""
) -> list[str]:
    """Which ``candidates`` a fresh interpreter holds after ``imports`` (and the code ``then``)."""
    code = (
        "import importlib, sys\n"
        f"for m in {list(imports)!r}: importlib.import_module(m)\n"
        f"{then}\n"
        f"print(' '.join(c for c in {list(candidates)!r} if c in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.split()


def test_a_node_without_a_cluster_loads_neither_the_kubernetes_client_nor_cel() -> None:
    heavy = ("kubernetes", "urllib3", "celpy", "prompt_toolkit")
    assert _loaded_after(_NODE_MODULES, heavy) == []


def test_a_node_without_nri_loads_no_nri() -> None:
    """drakit's NRI plugin (and NRI's generated messages) load only with ``nri.enabled``."""
    assert _loaded_after(_NODE_MODULES, ("drakit.nri", "drakit.enforce.enforcer")) == []


def test_the_kubernetes_client_loads_with_drakit_kube() -> None:
    assert _loaded_after(("drakit.kube",), ("kubernetes", "urllib3")) == ["kubernetes", "urllib3"]


def test_the_cli_loads_the_allocator_only_for_explain() -> None:
    """``drakit node`` starts from ``drakit.commands.cli``; the allocator (the resource.k8s.io
    models, CEL) is ``drakit explain``'s alone."""
    heavy = ("drakit.allocator", "drakit.explain.report", "celpy")
    assert _loaded_after(("drakit.commands.cli",), heavy) == []
    lookup = "import click; assert cli.get_command(click.Context(cli), 'explain') is not None"
    then = f"from drakit.commands.cli import cli; {lookup}"
    assert _loaded_after(("drakit.commands.cli",), ("drakit.allocator",), then=then) == [
        "drakit.allocator"
    ]


def test_packaging_loads_only_for_a_plugin_that_declares_a_hook_api() -> None:
    """The bundled backends declare no ``hook_api``, so their node has no use for packaging."""
    build = (
        "from drakit.host.settings import DrakitSettings\n"
        "from drakit.models import NodeInfo\n"
        "from drakit.host.loader import check_api_version\n"
        "from drakit.host.pluginhost import PluginHost\n"
        "backends = ('cpu', 'nvidia_gpu', 'amd_ainic', 'composite')\n"
        "host = PluginHost(DrakitSettings(plugins={b: {} for b in backends}),"
        " NodeInfo(name='n', sysfs_root='/nonexistent'))\n"
        "assert list(host.backends) == list(backends)\n"
    )
    assert _loaded_after(("drakit.node.daemon",), ("packaging",), then=build) == []
    declared = build + "check_api_version('p', type('P', (), {'hook_api': '>=1.0'}))\n"
    assert _loaded_after(("drakit.node.daemon",), ("packaging",), then=declared) == ["packaging"]
