"""File-system helpers for everything drakit creates on a node: names, modes, no links.

``drakit node`` runs privileged; every path it builds from input (a claim UID, a driver name)
must stay inside its directory (:func:`check_component`), every file or directory it creates has
an explicit mode that does not depend on the process umask, and it never follows a symbolic link
planted where it creates, reads or removes a file of its own. The file operations themselves are
the public :mod:`drakit.statefiles` (backends keep their state files with them too).
"""

from __future__ import annotations

import re
from typing import Final

from drakit.errors import PermanentError

__all__ = ["check_component"]

_COMPONENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_COMPONENT_BYTES: Final = 255


def check_component(value: str, what: str, *, max_bytes: int = MAX_COMPONENT_BYTES) -> str:
    """``value`` if it is usable as one file-name component, else PermanentError naming ``what``.

    Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit (so never ``..``,
    never a separator, never a hidden name), at most ``max_bytes`` bytes.
    """
    if not _COMPONENT.fullmatch(value) or len(value.encode()) > max_bytes or ".." in value:
        shown = value if len(value) <= 80 else value[:77] + "..."  # noqa: PLR2004
        raise PermanentError(
            f"{what} {shown!r} cannot be used in a file name: only letters, digits, '.', '_' "
            f"and '-' are allowed, starting with a letter or digit, no '..', at most "
            f"{max_bytes} bytes"
        )
    return value
