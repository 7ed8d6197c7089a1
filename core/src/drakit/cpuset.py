"""CPU list syntax (``0-3,8,10-11``) as used by sysfs, cgroups and the kubelet.

The same syntax appears in configuration (reserved CPUs), in sysfs files read by discovery and
written by the hardware simulator, and in the cpusets handed to containers, so it lives in core
as a small public helper.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

__all__ = ["MAX_CPULIST_CHARS", "MAX_CPUS", "CpuListError", "format_cpulist", "parse_cpulist"]

MAX_CPUS = 8192
"""CPU ids run from 0 to 8191: Linux's largest ``CONFIG_NR_CPUS`` (x86-64 ``MAXSMP``)."""
MAX_CPULIST_CHARS = 65536
"""The longest CPU list text accepted (every CPU listed singly fits in about 40 KiB)."""


class CpuListError(ValueError):
    """A string is not in CPU list syntax."""


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse a CPU list such as ``"0-3,8,10-11"`` into a set of CPU ids.

    An empty string (or one of whitespace) is the empty set, as in sysfs files like
    ``/sys/devices/system/cpu/isolated``.

    Raises:
        CpuListError: the text is not a CPU list, is longer than :data:`MAX_CPULIST_CHARS` or
            names a CPU id of :data:`MAX_CPUS` or more; the message names the offending part.
    """
    if len(text) > MAX_CPULIST_CHARS:
        raise CpuListError(
            f"a CPU list of {len(text)} characters is too long (at most {MAX_CPULIST_CHARS})"
        )
    # quoted with escapes, so a newline in the input cannot split the one-line error
    shown = json.dumps(text if len(text) <= 40 else f"{text[:37]}...", ensure_ascii=False)[1:-1]  # noqa: PLR2004
    cpus: set[int] = set()
    stripped = text.strip()
    if not stripped:
        return frozenset()
    for raw in stripped.split(","):
        part = raw.strip()
        lo_text, sep, hi_text = part.partition("-")
        if not _is_number(lo_text) or (sep and not _is_number(hi_text)):
            raise CpuListError(f'"{shown}" is not a CPU list (example: "0-3,8")')
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
        if hi >= MAX_CPUS:
            raise CpuListError(f'"{shown}" is out of range: CPU ids run from 0 to {MAX_CPUS - 1}')
        if hi < lo:
            raise CpuListError(f'"{shown}" is not a CPU list (range "{part}" runs backwards)')
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def _is_number(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts superscripts and other scripts' digits)."""
    return text.isascii() and text.isdigit()


def format_cpulist(cpus: Iterable[int]) -> str:
    """Format CPU ids as a canonical CPU list: sorted, ranges collapsed (``0-3,8``)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
