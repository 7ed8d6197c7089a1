"""ttrpc framing and NRI's connection multiplexer: bytes in, frames out, and back.

Pure and synchronous: no sockets here. Sources (containerd/ttrpc v1.2.x ``channel.go``, NRI
``pkg/net/multiplex/mux.go``) are cited in docs/nri.md.

- A **ttrpc frame** is a 10-byte header (u32 BE data length, u32 BE stream id, u8 type, u8 flags)
  and then the data, at most :data:`MAX_MESSAGE` (4 MiB) of it.
- A **mux frame** is an 8-byte header (u32 BE connection id, u32 BE payload length) and then the
  payload, at most :data:`MAX_MUX_PAYLOAD` (10 + 4 MiB). One unix socket carries the logical
  connections :data:`PLUGIN_CONN` and :data:`RUNTIME_CONN`; each is a byte stream that carries
  ttrpc frames, which the writer may split over several mux frames.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

TTRPC_HEADER = 10
MAX_MESSAGE = 4 << 20
MUX_HEADER = 8
MAX_MUX_PAYLOAD = TTRPC_HEADER + MAX_MESSAGE
# The Go peer reads each logical connection through a 4096-byte bufio.Reader and refuses (ENOMEM,
# the connection dies) a mux frame larger than the buffer it reads into; see :func:`mux_frames`.
GO_READ_BUFFER = 4096
PLUGIN_CONN = 1
RUNTIME_CONN = 2

_TTRPC = struct.Struct(">IIBB")
_MUX = struct.Struct(">II")


class MessageType(enum.IntEnum):
    """A ttrpc frame's type."""

    REQUEST = 1
    RESPONSE = 2
    DATA = 3


class Flags(enum.IntFlag):
    """A ttrpc frame's flags (unary calls use none)."""

    REMOTE_CLOSED = 1
    REMOTE_OPEN = 2
    NO_DATA = 4


class WireError(Exception):
    """The peer sent bytes that break the protocol; the connection cannot continue."""


class TruncatedError(WireError):
    """The stream ended inside a frame."""


@dataclass(frozen=True)
class Frame:
    """One ttrpc frame.

    Attributes:
        stream_id: The stream (odd: started by the client).
        type: Its :class:`MessageType` (an unknown type is kept as its number).
        flags: Its flags.
        data: The body (a protobuf ``Request`` or ``Response``); empty when ``oversized``.
        oversized: The sender claimed more than :data:`MAX_MESSAGE`; the body was read and
            dropped, as ttrpc does, so the stream can be answered with ``ResourceExhausted``.
        length: The data length the header claimed.
    """

    stream_id: int
    type: int
    flags: int
    data: bytes
    oversized: bool = False
    length: int = 0


def encode_frame(stream_id: int, type_: MessageType, data: bytes, flags: int = 0) -> bytes:
    """One ttrpc frame's bytes.

    Raises:
        ValueError: ``data`` is over :data:`MAX_MESSAGE` (ttrpc's ``OversizedMessageErr``) or
            ``stream_id`` does not fit in 32 bits.
    """
    if len(data) > MAX_MESSAGE:
        raise ValueError(
            f"ttrpc message of {len(data)} bytes is over the {MAX_MESSAGE}-byte limit; "
            "send less per call (split the work)"
        )
    if not 0 <= stream_id < 1 << 32:
        raise ValueError(f"stream_id {stream_id} is not a u32")
    return _TTRPC.pack(len(data), stream_id, int(type_), flags) + data


class FrameDecoder:
    """Reassembles ttrpc frames from one logical connection's bytes, however they were split."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._skip = 0  # body bytes of an oversized frame still to drop

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return the frames they complete, in order."""
        self._buf += data
        frames: list[Frame] = []
        while True:
            if self._skip:
                dropped = min(self._skip, len(self._buf))
                del self._buf[:dropped]
                self._skip -= dropped
                if self._skip:
                    return frames
            if len(self._buf) < TTRPC_HEADER:
                return frames
            length, sid, mtype, flags = _TTRPC.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                del self._buf[:TTRPC_HEADER]
                self._skip = length
                frames.append(Frame(sid, mtype, flags, b"", oversized=True, length=length))
                continue
            if len(self._buf) < TTRPC_HEADER + length:
                return frames
            body = bytes(self._buf[TTRPC_HEADER : TTRPC_HEADER + length])
            del self._buf[: TTRPC_HEADER + length]
            frames.append(Frame(sid, mtype, flags, body, length=length))

    def close(self) -> None:
        """The connection ended: fail if it ended inside a frame.

        Raises:
            TruncatedError: Bytes of an unfinished frame are buffered.
        """
        if self._buf or self._skip:
            raise TruncatedError(
                f"connection closed inside a ttrpc frame ({len(self._buf)} bytes buffered, "
                f"{self._skip} still to skip)"
            )


def encode_mux(conn_id: int, payload: bytes) -> bytes:
    """One mux frame's bytes.

    Raises:
        ValueError: ``conn_id`` is 0 (reserved) or ``payload`` is over :data:`MAX_MUX_PAYLOAD`.
    """
    if conn_id == 0 or not 0 < conn_id < 1 << 32:
        raise ValueError(f"mux connection id {conn_id}: 0 is reserved, ids are u32")
    if len(payload) > MAX_MUX_PAYLOAD:
        raise ValueError(f"mux payload of {len(payload)} bytes is over {MAX_MUX_PAYLOAD}")
    return _MUX.pack(conn_id, len(payload)) + payload


def mux_frames(conn_id: int, message: bytes) -> bytes:
    """The mux frames that carry one ttrpc frame ``message`` to a Go peer.

    At most two: the first ``min(len, 4096)`` bytes, then all the rest in one frame. A frame over
    4096 bytes while the Go reader wants a header kills the connection, and many small frames can
    overflow its 256-frame queue; this is what Go's own bufio writer emits.
    """
    head, rest = message[:GO_READ_BUFFER], message[GO_READ_BUFFER:]
    out = encode_mux(conn_id, head)
    if rest:
        out += encode_mux(conn_id, rest)
    return out


class MuxDecoder:
    """Splits the trunk's bytes into ``(conn_id, payload)`` mux frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add bytes; return the mux frames they complete, in order.

        Raises:
            WireError: A frame claims more than :data:`MAX_MUX_PAYLOAD` (the Go mux tears the
                connection down too).
        """
        self._buf += data
        out: list[tuple[int, bytes]] = []
        while len(self._buf) >= MUX_HEADER:
            conn_id, length = _MUX.unpack_from(self._buf)
            if length > MAX_MUX_PAYLOAD:
                raise WireError(
                    f"mux frame for connection {conn_id} claims {length} bytes, over the "
                    f"{MAX_MUX_PAYLOAD}-byte limit"
                )
            if len(self._buf) < MUX_HEADER + length:
                break
            out.append((conn_id, bytes(self._buf[MUX_HEADER : MUX_HEADER + length])))
            del self._buf[: MUX_HEADER + length]
        return out

    def close(self) -> None:
        """The trunk ended: fail if it ended inside a frame.

        Raises:
            TruncatedError: Bytes of an unfinished mux frame are buffered.
        """
        if self._buf:
            raise TruncatedError(
                f"connection closed inside a mux frame ({len(self._buf)} bytes buffered)"
            )
