"""``plugins.nvidia_gpu``: what the NVIDIA backend publishes and how it watches GPU health."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from drakit.config import PluginSettings

__all__ = ["APPLICATION_XIDS", "NvidiaGpuSettings"]

APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)
"""XIDs NVIDIA's DRA driver treats as application errors (they taint nothing by default)."""


class NvidiaGpuSettings(PluginSettings):
    """``plugins.nvidia_gpu``.

    ``mig_partitions`` publishes every MIG placement of a GPU in MIG mode as a partitionable
    device (KEP-4815) next to the full GPU; all of them draw on one counter set per GPU, so the
    scheduler never hands out a full GPU and a slice of it together. It needs the API server's
    ``DRAPartitionableDevices`` feature (on by default since Kubernetes 1.36); where the server
    drops ``consumesCounters`` the node reports it and stays unready, and this key turns the
    partitions off.
    """

    mig_partitions: bool = Field(
        default=True, description="Publish MIG placements of GPUs in MIG mode (KEP-4815)"
    )
    whole_device_counters: bool = Field(
        default=False,
        description="Make every full GPU consume a counter set of its own, also without a "
        "composite, for a Kueue that charges counters (docs/multi-node.md#kueue); an "
        "adminAccess claim on a GPU another claim holds is then never allocated",
    )
    health_watch: bool = Field(default=True, description="Watch NVML XID events on a thread")
    ignored_xids: tuple[int, ...] = Field(
        default=APPLICATION_XIDS,
        description="XIDs that leave a GPU healthy (default: NVIDIA's application XIDs)",
    )
    taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        default="NoSchedule", description="Effect of the taint on a GPU with a critical XID"
    )
    health_clear_after: float | None = Field(
        default=None,
        gt=0,
        description="Seconds without a new critical XID before a GPU is healthy again "
        "(default: it stays unhealthy until drakit restarts)",
    )
    mps_pipe_directory: str = Field(
        default="/tmp/nvidia-mps",  # noqa: S108 - the MPS control daemon's default
        pattern=r"^/",
        description="The node's MPS control daemon pipe directory (mounted into MPS clients)",
    )
    driver_files: Literal["auto", "required", "none"] = Field(
        default="auto",
        description="Carry the driver's libraries, binaries and sockets in the claim's CDI "
        "spec (found under driver_root): auto (when libcuda is found), required (a claim "
        "fails without them), none (the NVIDIA runtime in legacy mode injects them)",
    )
    driver_root: str = Field(
        default="/",
        pattern=r"^/",
        description="The host directory the driver's user space is installed under "
        "(/run/nvidia/driver for a driver container)",
    )
    driver_root_seen: str | None = Field(
        default=None,
        pattern=r"^/",
        description="Where drakit sees driver_root, when not at the same path (a pod that "
        "mounts it elsewhere)",
    )
    cdi_hook: str = Field(
        default="auto",
        pattern=r"^(auto|none|/.+)$",
        description="nvidia-cdi-hook on the host, for the loader-cache and link hooks: auto "
        "(looked up under driver_root), none (libraries mounted in /usr/local/nvidia/lib64 "
        "instead), or its absolute path",
    )
    nvidia_smi: str = Field(
        default="nvidia-smi",
        description="nvidia-smi, for time-slice intervals other than Default",
    )
