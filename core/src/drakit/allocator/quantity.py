"""Kubernetes resource quantities as exact fractions.

The allocator compares, adds and rounds capacities and counters; doing that on
:class:`fractions.Fraction` keeps ``1Gi == 1024Mi`` and ``500m + 500m == 1`` exact, as
``resource.Quantity`` is in Go.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from drakit.models import quantity_value

__all__ = ["format_quantity", "parse_quantity"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string such as ``80Gi``, ``500m`` or ``1e3``.

    :func:`drakit.models.quantity_value`, the one quantity parser (publishing compares
    capacities with it too), raising where it answers ``None`` and cached: the allocator reads
    the same few capacity strings over and over.

    Raises:
        ValueError: ``text`` is not a Kubernetes quantity.
    """
    value = quantity_value(str(text))
    if value is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 8, 80Gi, 500m)")
    return value


def format_quantity(value: Fraction) -> str:
    """A short quantity string for ``value``.

    A binary suffix for multiples of 1Mi (``80Gi``), else a decimal one where exact (``400G``,
    ``4k``), else the plain, milli, micro or nano value.
    """
    if value.denominator == 1:
        n = value.numerator
        if n != 0 and n % 1024**2 == 0:  # memory-like: the largest exact binary suffix
            for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
                unit = 1024**power
                if n % unit == 0:
                    return f"{n // unit}{suffix}"
        for suffix, exp in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
            if n != 0 and n % 10**exp == 0:
                return f"{n // 10**exp}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    micro = value * 10**6
    if micro.denominator == 1:
        return f"{micro.numerator}u"
    return f"{round(value * 10**9)}n"
