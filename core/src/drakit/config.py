"""What a plugin's configuration section is built from.

A backend subclasses :class:`PluginSettings` for its section (``plugins.<name>``), may use
:data:`DriverName` in it, and turns a pydantic error into lines with :func:`validation_errors`.
Unknown keys are errors. Errors carry a dotted path and the fix::

    plugins.cpu.reserved: "0-3,x" is not a CPU list (example: "0-3,8")

Loading drakit's own configuration (the YAML file, ``DRAKIT_*`` variables, the sections of
drakit itself) is internal: :mod:`drakit.host.settings`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from drakit.errors import ConfigInvalid

__all__ = ["DriverName", "PluginSettings", "parse_opaque_config", "validation_errors"]

MAX_NAME = 253
"""Names (a strategy, a node, a profile) are at most this long: a DNS subdomain's limit."""

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A lower-case DNS subdomain (RFC 1123), without its length limit."""


def _driver_name(value: str) -> str:
    if len(value.encode()) > 63 or not DNS_SUBDOMAIN.match(value):  # noqa: PLR2004
        raise ValueError(
            f"{value[:80]!r} is not a DRA driver name: use a lower-case DNS subdomain of at most"
            " 63 characters, e.g. fpga.acme.com"
        )
    return value


DriverName = Annotated[str, AfterValidator(_driver_name)]
"""A DRA driver name: a lower-case DNS subdomain of at most 63 characters."""
_Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class PluginSettings(BaseModel):
    """Base of every plugin's configuration section (``plugins.<name>``).

    Core owns two keys in every section: ``driver`` (the DRA driver name this plugin publishes
    under; plugins sharing a name share one kubelet registration and one slice pool) and
    ``strategy`` (the allocation strategy used for publishing and as the per-claim default).
    A plugin adds its own fields in a subclass; unknown keys are rejected.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: DriverName | None = Field(
        default=None, description="DRA driver name; default: the plugin's"
    )
    strategy: _Name | None = Field(default=None, description="Allocation strategy name")

    def member_plugins(self) -> tuple[str, ...]:
        """Backends whose devices this plugin composes (default: none).

        An enabled member whose section sets no ``driver`` publishes under this plugin's
        driver, so the composed devices and their members share one pool (and its counters):
        see :func:`drakit.host.settings.plugin_drivers`.
        """
        return ()


_FIXES: dict[str, str] = {
    "extra_forbidden": "unknown key; remove it or check its spelling",
    "missing": "required; add it",
}


def _format_loc(loc: tuple[int | str, ...], prefix: str) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:  # a key from the file is shown quoted when it would break the one-line error
            plain = item.isprintable() and 0 < len(item) <= 80  # noqa: PLR2004 - "" shows as ''
            parts.append(item if plain else repr(item[:80]))
    return ".".join(parts)


def validation_errors(
    exc: ValidationError, *, prefix: str = "", known: Mapping[str, list[str]] | None = None
) -> list[tuple[str, str]]:
    """Turn a pydantic ``ValidationError`` into ``(path, message-with-fix)`` pairs.

    Args:
        exc: the error.
        prefix: dotted path of the model inside the whole configuration (``plugins.cpu``).
        known: for ``extra_forbidden`` errors, the known keys per parent path, to list them.
    """
    out: list[tuple[str, str]] = []
    for err in exc.errors(include_url=False):
        path = _format_loc(tuple(err["loc"]), prefix)
        kind = err["type"]
        msg = str(err["msg"])
        if kind == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif kind in _FIXES:
            msg = _FIXES[kind]
            parent = path.rpartition(".")[0]
            if kind == "extra_forbidden" and known and parent in known:
                msg += f" (known keys: {', '.join(sorted(known[parent]))})"
        else:
            got = err.get("input")
            shown = got if isinstance(got, (int, float, str, bool)) else type(got).__name__
            msg = f"{msg} (got {shown!r})"
        out.append((path, msg))
    return out


_Config = TypeVar("_Config", bound=BaseModel)


def parse_opaque_config(
    model: type[_Config],
    ours: tuple[str, str],
    api_version: str,
    kind: str,
    parameters: Mapping[str, Any],
) -> _Config | None:
    """A ``drakit_parse_config`` body: ``parameters`` validated as ``model``, if they are ours.

    Args:
        model: the backend's opaque config model.
        ours: the ``(apiVersion, kind)`` that names ``model``.
        api_version: the object's ``apiVersion``.
        kind: the object's ``kind``.
        parameters: the object, as the claim or class holds it.

    Returns:
        The validated config, or ``None`` when ``(api_version, kind)`` is not ``ours``.

    Raises:
        ConfigInvalid: one ``(field, message)`` per problem.
    """
    if (api_version, kind) != ours:
        return None
    try:
        return model.model_validate(dict(parameters))
    except ValidationError as e:
        raise ConfigInvalid(validation_errors(e)) from e
