"""What runs drakit: ``drakit node`` (the node driver), ``drakit webhook``, ``drakit demo``.

Each imports what it runs only when it runs (the node no Kubernetes client before it starts,
the demo its node services).
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path
from typing import Any

import click

from drakit.clikit import UserError, host_root
from drakit.host.settings import load_settings
from drakit.host.startup import effective_settings

__all__ = ["demo", "node", "webhook"]


@click.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--node-name", help="This node's name (default: $NODE_NAME, the profile, hostname).")
@click.option(
    "--kubelet-dir", type=click.Path(path_type=Path), help="Holds plugins_registry/, plugins/."
)
@click.option("--cdi-dir", type=click.Path(path_type=Path), help="Where CDI specs are written.")
@click.option("--state-dir", type=click.Path(path_type=Path), help="Checkpoints and locks.")
@click.option("--profile", help="Simulated hardware profile instead of the real sysfs.")
@click.option(
    "--sysfs-root",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Host root whose sys/ is read instead of /sys (the sysfs directory itself works too).",
)
@click.option(
    "--device-root",
    type=click.Path(path_type=Path, file_okay=False),
    help="Host directory whose dev/ holds the device nodes (default: /, or the simulated root).",
)
@click.option(
    "--device-root-mount",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where this process sees --device-root (default: at the same path).",
)
@click.option("--metrics-port", type=int, help="Port for /metrics, /healthz, /readyz (0: any).")
def node(
    config_path: Path | None,
    kubeconfig: Path | None,
    node_name: str | None,
    kubelet_dir: Path | None,
    cdi_dir: Path | None,
    state_dir: Path | None,
    profile: str | None,
    sysfs_root: Path | None,
    device_root: Path | None,
    device_root_mount: Path | None,
    metrics_port: int | None,
) -> None:
    """Run the node driver (the DaemonSet entrypoint); flags override the config file."""
    import os  # noqa: PLC0415

    from drakit.kube import KubeClient  # noqa: PLC0415 - only the node talks to a cluster
    from drakit.node.daemon import Node  # noqa: PLC0415

    overrides: dict[str, Any] = {
        "kubeconfig": kubeconfig,
        "node_name": node_name or os.environ.get("NODE_NAME"),
        "kubelet_dir": kubelet_dir,
        "cdi_dir": cdi_dir,
        "state_dir": state_dir,
        "profile": profile,
        "sysfs_root": host_root(sysfs_root),
        "device_root": device_root,
        "device_root_mount": device_root_mount,
    }
    settings = load_settings(config_path, overrides=overrides)
    if metrics_port is not None:
        settings = settings.model_copy(
            update={"metrics": settings.metrics.model_copy(update={"port": metrics_port})}
        )
    logging.getLogger().setLevel(settings.log_level)
    _lean_log_records()
    kube = KubeClient.from_kubeconfig(settings.kubeconfig)
    Node(settings, kube=kube).run()


def _lean_log_records() -> None:
    """Stop collecting what the log format never shows: caller, thread, process.

    The logging HOWTO's "Optimization" switches, set by the node process only (it owns its
    logging; a prepare logs one INFO line per claim). Never set where drakit is a library.
    """
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


@click.command()
@click.option(
    "--cert-file", required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.option(
    "--key-file", required=True, type=click.Path(path_type=Path, dir_okay=False, exists=True)
)
@click.option("--port", type=int, default=8443, show_default=True, help="HTTPS port (0: any).")
@click.option("--address", default="0.0.0.0", show_default=True, help="Listen address.")  # noqa: S104
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--kubeconfig", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--kueue", is_flag=True, help="Emit exactly requests only (Kueue-managed pods).")
@click.option("--pair-class", default="gpu-nic-pair", show_default=True, help="Pairs' class.")
@click.option(
    "--client-ca",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Answer admission calls only from clients with a certificate signed by this CA "
    "(the API server's, from its AdmissionConfiguration kubeconfig).",
)
@click.option(
    "--client-name",
    "client_names",
    multiple=True,
    help="With --client-ca: the client certificate's common name (or a DNS name) must be one "
    "of these (repeatable).",
)
def webhook(
    cert_file: Path,
    key_file: Path,
    port: int,
    address: str,
    config_path: Path | None,
    kubeconfig: Path | None,
    kueue: bool,
    pair_class: str,
    client_ca: Path | None,
    client_names: tuple[str, ...],
) -> None:
    """Serve the admission webhook over HTTPS: /mutate-pods, /validate-claims, /healthz.

    Answers have no side effects; the templates that patched pods name are made in the pods'
    namespaces by the template controller running in this process.
    """
    from drakit.admission import WebhookOptions  # noqa: PLC0415
    from drakit.host.mutators import load_mutators  # noqa: PLC0415
    from drakit.host.pluginhost import PluginHost  # noqa: PLC0415
    from drakit.kube import KubeClient  # noqa: PLC0415
    from drakit.models import NodeInfo  # noqa: PLC0415
    from drakit.webhook import WebhookServer  # noqa: PLC0415
    from drakit.webhook.admission import Admission  # noqa: PLC0415
    from drakit.webhook.templates import TemplateController  # noqa: PLC0415

    if client_names and client_ca is None:
        raise UserError("--client-name needs --client-ca (the CA that signs those clients)")
    settings = effective_settings(load_settings(config_path, overrides={"kubeconfig": kubeconfig}))
    logging.getLogger().setLevel(settings.log_level)
    host = PluginHost(settings, NodeInfo(name="webhook", sysfs_root="/"))
    options = WebhookOptions(kueue=kueue, flags={"pair_class": pair_class})
    mutators = load_mutators(options, host.driver_names())
    engine = Admission(host, mutators)
    try:
        server = WebhookServer(
            engine,
            cert_file,
            key_file,
            address=address,
            port=port,
            client_ca=client_ca,
            client_names=frozenset(client_names),
        )
    except (OSError, ssl.SSLError) as e:
        raise UserError(f"cannot serve on {address}:{port} with {cert_file}: {e}") from e
    if client_ca is None:
        logging.getLogger(__name__).warning(
            "webhook callers are not authenticated (no --client-ca): anyone reaching the port "
            "gets answers (answers change nothing)"
        )
    stop = threading.Event()
    controller = TemplateController(
        KubeClient.from_kubeconfig(settings.kubeconfig), mutators, engine
    )
    thread = threading.Thread(
        target=controller.run, args=(stop,), name="drakit-templates", daemon=True
    )
    thread.start()
    click.echo(f"drakit webhook: serving https://{address}:{server.port}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        server.shutdown()


@click.command()
@click.option("--profile", default=None, help="Simulated profile (default: h200-8gpu-8ainic).")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="drakit configuration: run its backends instead of the built-in four.",
)
@click.option(
    "--claim",
    "claim_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="ResourceClaim YAML (DeviceClass documents may precede it) instead of the example.",
)
def demo(profile: str | None, config_path: Path | None, claim_path: Path | None) -> None:
    """Run drakit end to end on simulated hardware; needs no cluster."""
    from drakit.commands.demo import run_demo  # noqa: PLC0415 - the demo pulls in the node services

    run_demo(profile, config=config_path, claim=claim_path)
