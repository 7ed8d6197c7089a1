"""``plugins.nvidia_gpu``: what the NVIDIA backend publishes and how it watches GPU health."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

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
    driver_files: Literal["auto", "toolkit", "own", "required", "none"] = Field(
        default="auto",
        description="Where the driver's libraries, binaries, sockets and hooks in the claim's "
        "CDI spec come from: auto (nvidia-ctk's output when nvidia-ctk is found, else "
        "drakit's own discovery under driver_root; device nodes only when neither finds "
        "libcuda), toolkit (nvidia-ctk's output only: a claim fails, retryably, while it "
        "cannot be had), own (drakit's own discovery only), required (as auto, but a claim "
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
    nvidia_ctk: str = Field(
        default="auto",
        pattern=r"^(auto|/.+)$",
        description="The NVIDIA container toolkit's nvidia-ctk as this process sees it, run as "
        "`nvidia-ctk cdi generate` for driver_files auto and toolkit: auto (on PATH, else "
        "usr/bin, usr/local/bin or usr/local/nvidia/toolkit under where drakit sees "
        "driver_root) or its absolute path",
    )
    toolkit_mode: Literal["management", "nvml"] = Field(
        default="management",
        description="nvidia-ctk cdi generate --mode: management (the driver's files found by "
        "their names, no NVML; needs the NVIDIA device nodes under toolkit_dev_root) or nvml "
        "(NVML through the driver's libnvidia-ml; adds graphics libraries); drakit takes only "
        "the spec's common containerEdits",
    )
    toolkit_dev_root: str | None = Field(
        default=None,
        pattern=r"^/",
        description="nvidia-ctk cdi generate --dev-root: where this process sees the directory "
        "holding the host's dev/ (default: where it sees driver_root)",
    )
    toolkit_timeout: float = Field(
        default=60.0,
        gt=0,
        le=600,
        description="Seconds nvidia-ctk cdi generate may run before drakit gives up on it",
    )
    nvidia_smi: str = Field(
        default="nvidia-smi",
        description="nvidia-smi, for time-slice intervals other than Default",
    )

    @model_validator(mode="after")
    def _toolkit_needs_the_hook(self) -> NvidiaGpuSettings:
        if self.driver_files == "toolkit" and self.cdi_hook == "none":
            raise ValueError(
                "driver_files: toolkit needs nvidia-cdi-hook (the toolkit's spec runs it for "
                "the library links and the loader cache), but cdi_hook is none: set cdi_hook "
                "to auto or the hook's path, or use driver_files: own"
            )
        return self
