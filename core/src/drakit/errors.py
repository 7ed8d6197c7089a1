"""drakit's exception taxonomy.

Plugins raise these (never a bare ``Exception``); core turns them into one clear line for a
user, a per-claim error string for the kubelet, or a retry.
"""

from __future__ import annotations

__all__ = [
    "ConfigInvalid",
    "ConflictError",
    "DrakitError",
    "NotFoundError",
    "PermanentError",
    "PluginLoadError",
    "RetryableError",
    "SliceValidationError",
]


class DrakitError(Exception):
    """Base class of every error drakit raises on purpose."""


class PluginLoadError(DrakitError):
    """A configured plugin is not installed, fails to import, or breaks the hook contract."""

    def __init__(self, plugin: str, cause: str) -> None:
        super().__init__(f"plugin {plugin!r}: {cause}")
        self.plugin = plugin
        self.cause = cause


class ConfigInvalid(DrakitError):
    """Configuration (the drakit file, or a claim's opaque parameters) is invalid.

    ``errors`` holds one ``(path, message)`` pair per problem; ``path`` is dotted
    (``plugins.cpu.reserved``) and ``message`` says what is wrong and how to fix it.
    """

    def __init__(self, errors: list[tuple[str, str]], *, source: str = "") -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + "; ".join(f"{p}: {m}" if p else m for p, m in errors))

    def lines(self) -> list[str]:
        """One human-readable line per error, ``path: message``."""
        return [f"{p}: {m}" if p else m for p, m in self.errors]


class SliceValidationError(DrakitError):
    """Devices would render into ResourceSlices that the API server rejects.

    Raised before anything is sent; the message names the device and the rule.
    """


class RetryableError(DrakitError):
    """A transient failure (API server unreachable, device busy): the caller should retry."""


class PermanentError(DrakitError):
    """A failure that retrying will not fix (unknown device, bad allocation)."""


class NotFoundError(PermanentError):
    """The API object does not exist (HTTP 404); raised by :mod:`drakit.kube`."""


class ConflictError(PermanentError):
    """The write lost a race: stale ``resourceVersion``, failed precondition or name taken (409).

    Re-read and decide again; repeating the same request cannot succeed. Raised by
    :mod:`drakit.kube`; defined here so that code handling it needs no Kubernetes client.
    """
