"""Disk faults at the seam every state file of drakit goes through (:mod:`drakit.statefiles`).

A backend that keeps state (a ledger, a lock, a cache) through :mod:`drakit.statefiles` proves
it survives a failing disk by counting the file-system calls one prepare or unprepare makes, then
failing each in turn::

    with state_faults() as faults:
        prepare(a)                      # counted: faults.calls
        total = len(faults.calls)
        for k in range(total):
            faults.calls.clear()
            with faults.failing(k):     # the k-th call raises OSError(EIO)
                error = prepare(b)      # answers with an error naming the file, or succeeds
            ...                         # the retry succeeds; nothing is held twice
"""

from __future__ import annotations

import errno as errnos
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from drakit import statefiles

__all__ = ["SEAM", "StateFaults", "state_faults"]

SEAM = ("open", "read", "write", "fsync", "replace", "unlink", "mkdir", "fstat")
"""The ``os`` functions :mod:`drakit.statefiles` reads and writes through: the ones counted."""


class StateFaults:
    """``os`` as :mod:`drakit.statefiles` sees it: counts the seam's calls, fails one of them.

    Attributes:
        calls: The names of the seam's calls made since the list was last cleared.
        fail_at: Index into :attr:`calls` of the call that fails, or ``None``.
        errno: The error the failing call raises (default ``EIO``, a disk error).
    """

    def __init__(self, errno: int = errnos.EIO) -> None:
        self.calls: list[str] = []
        self.fail_at: int | None = None
        self.errno = errno

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in SEAM:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if self.fail_at is not None and len(self.calls) - 1 == self.fail_at:
                raise OSError(self.errno, os.strerror(self.errno))
            return real(*args, **kwargs)

        return call

    @contextmanager
    def failing(self, k: int) -> Iterator[None]:
        """The ``k``-th seam call (counted from the last clear of :attr:`calls`) fails inside."""
        self.fail_at = k
        try:
            yield
        finally:
            self.fail_at = None


@contextmanager
def state_faults(errno: int = errnos.EIO) -> Iterator[StateFaults]:
    """:mod:`drakit.statefiles` goes through a :class:`StateFaults` inside the block."""
    faults = StateFaults(errno)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(statefiles, "os", faults)
        yield faults
