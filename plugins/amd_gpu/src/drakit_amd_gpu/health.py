"""AMD GPU health from sysfs: uncorrectable RAS errors, or a GPU missing from the KFD topology.

:func:`problem_of` is read at discovery (as a device taint) and by the health hook.
"""

from __future__ import annotations

from drakit_amd_gpu.discovery import AmdGpu

__all__ = ["TAINT", "problem_of"]

TAINT = "gpu.amd.drakit.io/unhealthy"


def problem_of(gpu: AmdGpu) -> tuple[str, str] | None:
    """``(taint value, message)`` when sysfs says the GPU is unhealthy, else ``None``."""
    if gpu.ras_uncorrectable:
        blocks = ", ".join(f"{b} {n}" for b, n in sorted(gpu.ras_uncorrectable.items()))
        return "ras", f"uncorrectable RAS errors: {blocks}"
    if gpu.ras_unreadable:
        blocks = ", ".join(gpu.ras_unreadable)
        return "ras", (
            f"RAS error counts unreadable: {blocks} (amdgpu is recovering the GPU, or its "
            "error query failed)"
        )
    if not gpu.nodes and gpu.kfd_refused:
        return "kfd", (
            f"the KFD topology refused this process {gpu.kfd_refused} GPU node(s) (EPERM): "
            "amdkfd shows a GPU's properties only to a process whose device cgroup lets it "
            "open the GPU's render node; run the node pod privileged (the chart's amd_gpu "
            "backend is by default) or give it the GPUs' /dev/dri nodes"
        )
    if not gpu.nodes:
        return "kfd", "the GPU is missing from the KFD topology (amdkfd did not initialise it)"
    return None
