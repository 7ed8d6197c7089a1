"""drakit.nri: a small NRI (Node Resource Interface) plugin library, with no drakit imports.

``wire``: ttrpc framing and NRI's connection multiplexer (pure); ``plugin``: the connection, the
registration handshake and the event handlers; ``api``: NRI's generated protobuf messages
(``api.proto`` of NRI v0.12.3). See docs/nri.md, "The NRI layer".
"""

from ._proto import api_pb2 as api
from .plugin import (
    DEFAULT_SOCKET,
    ClosedError,
    Connection,
    Handlers,
    NRIError,
    Plugin,
    check_registration,
    event_mask,
)
from .wire import TruncatedError, WireError

__all__ = [
    "DEFAULT_SOCKET",
    "ClosedError",
    "Connection",
    "Handlers",
    "NRIError",
    "Plugin",
    "TruncatedError",
    "WireError",
    "api",
    "check_registration",
    "event_mask",
]
