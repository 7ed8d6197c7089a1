"""drakit.nri.wire: ttrpc and mux frames, byte for byte, split anyhow, malformed, oversized, cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drakit.nri import api
from drakit.nri._proto import ttrpc_pb2 as ttrpc
from drakit.nri.wire import (
    MAX_MESSAGE,
    MAX_MUX_PAYLOAD,
    Frame,
    FrameDecoder,
    MessageType,
    MuxDecoder,
    TruncatedError,
    WireError,
    encode_frame,
    encode_mux,
    mux_frames,
)

# RegisterPlugin{plugin_name="p", plugin_idx="10"} as a ttrpc Request on stream 1, hand-encoded
# from the field numbers in nri.md (Request: service 1, method 2, payload 3, timeout_nano 4).
SERVICE = b"nri.pkg.api.v1alpha1.Runtime"
PAYLOAD = b"\x0a\x01p\x12\x0210"
REQUEST_BODY = (
    b"\x0a"
    + bytes([len(SERVICE)])
    + SERVICE
    + b"\x12\x0eRegisterPlugin"
    + b"\x1a"
    + bytes([len(PAYLOAD)])
    + PAYLOAD
    + b"\x20\x80\xa8\xd6\xb9\x07"  # timeout_nano = 2e9 (varint)
)
REQUEST_FRAME = (
    len(REQUEST_BODY).to_bytes(4, "big") + b"\x00\x00\x00\x01" + b"\x01\x00" + REQUEST_BODY
)


def test_the_generated_messages_encode_as_hand_built_bytes() -> None:
    payload = api.RegisterPluginRequest(plugin_name="p", plugin_idx="10").SerializeToString()
    assert payload == PAYLOAD
    request = ttrpc.Request(
        service=SERVICE.decode(),
        method="RegisterPlugin",
        payload=payload,
        timeout_nano=2_000_000_000,
    )
    assert request.SerializeToString() == REQUEST_BODY


def test_a_request_frame_is_byte_exact() -> None:
    assert encode_frame(1, MessageType.REQUEST, REQUEST_BODY) == REQUEST_FRAME


def test_an_empty_ok_response_is_a_ten_byte_frame() -> None:
    # RegisterPlugin's OK reply from the Go runtime: a Response with no status and an empty
    # payload encodes to nothing.
    assert ttrpc.Response(payload=api.Empty().SerializeToString()).SerializeToString() == b""
    assert encode_frame(7, MessageType.RESPONSE, b"") == bytes.fromhex("00000000 00000007 0200")


def test_an_error_response_carries_the_status() -> None:
    body = ttrpc.Response(status=ttrpc.Status(code=12, message="method X")).SerializeToString()
    assert body == b"\x0a\x0c\x08\x0c\x12\x08method X"


def test_the_decoder_reassembles_frames_split_at_every_byte() -> None:
    two = REQUEST_FRAME + encode_frame(3, MessageType.RESPONSE, b"\x12\x00")
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for i in range(len(two)):
        frames += decoder.feed(two[i : i + 1])
    decoder.close()
    assert frames == [
        Frame(1, MessageType.REQUEST, 0, REQUEST_BODY, length=len(REQUEST_BODY)),
        Frame(3, MessageType.RESPONSE, 0, b"\x12\x00", length=2),
    ]


@given(st.lists(st.binary(max_size=300), max_size=6), st.lists(st.integers(1, 50), min_size=1))
def test_any_split_gives_the_same_frames(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(2 * i + 1, MessageType.REQUEST, b) for i, b in enumerate(bodies))
    decoder = FrameDecoder()
    frames: list[Frame] = []
    pos, k = 0, 0
    while pos < len(stream):
        step = cuts[k % len(cuts)]
        frames += decoder.feed(stream[pos : pos + step])
        pos, k = pos + step, k + 1
    decoder.close()
    assert [f.data for f in frames] == bodies
    assert [f.stream_id for f in frames] == [2 * i + 1 for i in range(len(bodies))]


def test_an_oversized_frame_is_skipped_and_reported_then_decoding_goes_on() -> None:
    length = MAX_MESSAGE + 1
    header = length.to_bytes(4, "big") + (5).to_bytes(4, "big") + b"\x01\x00"
    decoder = FrameDecoder()
    frames = decoder.feed(header + b"x" * 1000)
    assert frames == [Frame(5, 1, 0, b"", oversized=True, length=length)]
    assert decoder.feed(b"x" * (length - 1000 - 1)) == []
    after = encode_frame(7, MessageType.REQUEST, b"ok")
    frames = decoder.feed(b"x" + after)
    assert [(f.stream_id, f.data) for f in frames] == [(7, b"ok")]
    decoder.close()


def test_a_frame_at_the_limit_is_accepted() -> None:
    body = b"\x00" * MAX_MESSAGE
    frames = FrameDecoder().feed(encode_frame(1, MessageType.REQUEST, body))
    assert len(frames) == 1
    assert not frames[0].oversized
    assert len(frames[0].data) == MAX_MESSAGE


def test_sending_an_oversized_message_is_refused() -> None:
    with pytest.raises(ValueError, match=r"over the 4194304-byte limit"):
        encode_frame(1, MessageType.REQUEST, b"\x00" * (MAX_MESSAGE + 1))


@pytest.mark.parametrize(
    "partial",
    [REQUEST_FRAME[:4], REQUEST_FRAME[:10], REQUEST_FRAME[:-1]],
    ids=["inside the header", "after the header", "one byte short"],
)
def test_eof_mid_frame_is_an_error(partial: bytes) -> None:
    decoder = FrameDecoder()
    assert decoder.feed(partial) == []
    with pytest.raises(TruncatedError, match="inside a ttrpc frame"):
        decoder.close()


def test_eof_while_skipping_an_oversized_frame_is_an_error() -> None:
    decoder = FrameDecoder()
    decoder.feed((MAX_MESSAGE + 5).to_bytes(4, "big") + b"\x00\x00\x00\x01\x01\x00")
    with pytest.raises(TruncatedError):
        decoder.close()


def test_a_mux_frame_is_byte_exact() -> None:
    assert encode_mux(2, b"abc") == bytes.fromhex("00000002 00000003") + b"abc"


@pytest.mark.parametrize("size", [0, 170, 4096, 4097, 10_000, 3_000_000])
def test_a_ttrpc_frame_goes_out_as_at_most_two_mux_frames(size: int) -> None:
    message = encode_frame(1, MessageType.REQUEST, b"\xab" * size)
    decoded = MuxDecoder().feed(mux_frames(2, message))
    assert all(conn == 2 for conn, _ in decoded)
    assert b"".join(p for _, p in decoded) == message
    assert len(decoded[0][1]) == min(len(message), 4096)
    assert len(decoded) == (1 if len(message) <= 4096 else 2)


def test_mux_frames_reassemble_per_connection() -> None:
    one = encode_frame(1, MessageType.REQUEST, b"to the plugin")
    two = encode_frame(1, MessageType.RESPONSE, b"to the client")
    trunk = encode_mux(1, one[:5]) + encode_mux(2, two) + encode_mux(1, one[5:])
    decoders = {1: FrameDecoder(), 2: FrameDecoder()}
    seen: list[tuple[int, bytes]] = []
    mux = MuxDecoder()
    for i in range(0, len(trunk), 3):
        for conn, payload in mux.feed(trunk[i : i + 3]):
            seen += [(conn, f.data) for f in decoders[conn].feed(payload)]
    mux.close()
    assert seen == [(2, b"to the client"), (1, b"to the plugin")]


def test_a_mux_frame_claiming_too_much_tears_the_trunk_down() -> None:
    header = (1).to_bytes(4, "big") + (MAX_MUX_PAYLOAD + 1).to_bytes(4, "big")
    with pytest.raises(WireError, match="over the 4194314-byte limit"):
        MuxDecoder().feed(header)


def test_eof_mid_mux_frame_is_an_error() -> None:
    mux = MuxDecoder()
    assert mux.feed(encode_mux(1, b"abcdef")[:-2]) == []
    with pytest.raises(TruncatedError, match="inside a mux frame"):
        mux.close()


@pytest.mark.parametrize("conn", [0, 1 << 32])
def test_reserved_or_invalid_connection_ids_are_refused(conn: int) -> None:
    with pytest.raises(ValueError, match="0 is reserved"):
        encode_mux(conn, b"")
