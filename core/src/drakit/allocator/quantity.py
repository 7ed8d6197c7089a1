"""Kubernetes resource quantities as exact fractions.

The allocator compares, adds and rounds capacities and counters; doing that on
:class:`fractions.Fraction` keeps ``1Gi == 1024Mi`` and ``500m + 500m == 1`` exact, as
``resource.Quantity`` is in Go.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["format_quantity", "parse_quantity"]

_PATTERN = re.compile(
    r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string such as ``80Gi``, ``500m`` or ``1e3``.

    Raises:
        ValueError: ``text`` is not a Kubernetes quantity.
    """
    m = _PATTERN.match(str(text).strip())
    if m is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 8, 80Gi, 500m)")
    number = Fraction(m.group(1))
    if m.group(2):
        return number * Fraction(10) ** int(m.group(2)[1:])
    suffix = m.group(3) or ""
    if suffix in _BINARY:
        return number * Fraction(1024) ** _BINARY[suffix]
    return number * Fraction(10) ** _DECIMAL[suffix]


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
