"""The framing vectors of testdata/framing.json (no daemon needed), for the blocking reader over
a real pipe and a BytesIO, for the asyncio reader, and for the sync client's FrameReader."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import threading
from typing import Any, Callable, List, Optional, Tuple

import pytest

from conftest import REPO_ROOT
from ckptd.errors import FramingError
from ckptd.framing import (
    MAX_HEADER_LINE,
    FrameReader,
    decode_body,
    encode_frame,
    encode_message,
    read_frame,
    read_message,
    read_message_async,
)

VECTORS_PATH = REPO_ROOT / "testdata" / "framing.json"
VECTORS = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))["vectors"]

Msg = Tuple[Any, Optional[bytes]]


def _expected(v: dict) -> List[Msg]:
    out = []
    for m in v["messages"]:
        att = m["attachment"]
        out.append((m["json"], None if att is None else base64.b64decode(att)))
    return out


def _read_all_sync(stream: Any) -> List[Msg]:
    msgs = []
    while True:
        m = read_message(stream)
        if m is None:
            return msgs
        msgs.append(m)


async def _read_all_async(data: bytes, chunk: int) -> List[Msg]:
    reader = asyncio.StreamReader(limit=1 << 16)

    async def feed() -> None:
        for i in range(0, len(data), chunk):
            reader.feed_data(data[i : i + chunk])
            await asyncio.sleep(0)
        reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    msgs = []
    try:
        while True:
            m = await read_message_async(reader)
            if m is None:
                return msgs
            msgs.append(m)
    finally:
        await feeder


def _through_pipe(data: bytes, piece: int, read: Callable[[int], List[Msg]]) -> List[Msg]:
    """Writes data into a real OS pipe in pieces of piece bytes from a thread while read(fd) reads it."""
    r, w = os.pipe()

    def writer() -> None:
        try:
            with os.fdopen(w, "wb", buffering=0) as f:
                for i in range(0, len(data), piece):
                    f.write(data[i : i + piece])
        except BrokenPipeError:  # the reader stopped at a bad frame
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        return read(r)
    finally:
        t.join()


def _via_pipe(data: bytes) -> List[Msg]:
    """Reads from a real OS pipe through a BufferedReader, written in small pieces by a thread."""

    def read(fd: int) -> List[Msg]:
        with os.fdopen(fd, "rb") as f:
            return _read_all_sync(f)

    return _through_pipe(data, 7, read)


def test_vectors_file_found() -> None:
    assert len(VECTORS) >= 10, VECTORS_PATH


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector_sync(vector: dict) -> None:
    data = base64.b64decode(vector["input"])
    for read in (lambda: _read_all_sync(io.BytesIO(data)), lambda: _via_pipe(data)):
        if "error" in vector:
            with pytest.raises(FramingError) as ei:
                read()
            assert ei.value.kind == vector["error"], ei.value
        else:
            assert read() == _expected(vector)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_vector_async(vector: dict, chunk: int) -> None:
    data = base64.b64decode(vector["input"])
    if "error" in vector:
        with pytest.raises(FramingError) as ei:
            asyncio.run(_read_all_async(data, chunk))
        assert ei.value.kind == vector["error"], ei.value
    else:
        assert asyncio.run(_read_all_async(data, chunk)) == _expected(vector)


def test_encode_roundtrip_with_unicode_and_attachment() -> None:
    msg = {"jsonrpc": "2.0", "id": "é-✓", "method": "stats", "params": {"s": "naïve ☃ 𝄞"}}
    att = bytes(range(256)) * 3
    data = encode_message(msg, att) + encode_message({"a": 1}) + encode_message({"b": 2}, b"")
    assert _read_all_sync(io.BytesIO(data)) == [(msg, att), ({"a": 1}, None), ({"b": 2}, b"")]
    assert asyncio.run(_read_all_async(data, 3)) == [(msg, att), ({"a": 1}, None), ({"b": 2}, b"")]


def test_encode_frame_headers() -> None:
    assert encode_frame(b"{}") == b"Content-Length: 2\r\n\r\n{}"
    assert encode_frame(b"{}", b"xyz") == b"Content-Length: 2\r\nCkptd-Attachment-Length: 3\r\n\r\n{}xyz"


def test_bare_newlines_and_blank_lines_between_frames() -> None:
    data = b"\r\nContent-Length: 2\nCkptd-Attachment-Length: 1\n\n{}Z"
    assert _read_all_sync(io.BytesIO(data)) == [({}, b"Z")]


@pytest.mark.parametrize(
    "header",
    [b"Content-Length: +2", b"Content-Length: 2_0", b"Content-Length:", b"garbage", b"Content-Length: \xd9\xa2"],
)
def test_bad_headers(header: bytes) -> None:
    with pytest.raises(FramingError) as ei:
        read_frame(io.BytesIO(header + b"\r\n\r\n{}"))
    assert ei.value.kind == "header"


def test_eof_inside_header() -> None:
    with pytest.raises(FramingError) as ei:
        read_frame(io.BytesIO(b"Content-Length: 2\r\n"))
    assert ei.value.kind == "eof"
    with pytest.raises(FramingError) as ei:
        read_frame(io.BytesIO(b"Content-Len"))
    assert ei.value.kind == "eof"


def test_large_attachment_over_pipe() -> None:
    att = os.urandom(3 * 1024 * 1024 + 17)
    data = encode_message({"id": 1}, att) * 2
    assert _via_pipe(data) == [({"id": 1}, att), ({"id": 1}, att)]
    assert asyncio.run(_read_all_async(data, 65536)) == [({"id": 1}, att), ({"id": 1}, att)]


# --- FrameReader (the sync client's reader) ------------------------------------------------------


class _Trickle:
    """A raw stream that returns at most ``chunk`` bytes per readinto."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self.data, self.pos, self.chunk = data, 0, chunk

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.chunk, len(self.data) - self.pos)
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def _read_all_frame_reader(raw: Any) -> List[Msg]:
    fr = FrameReader(raw)
    msgs: List[Msg] = []
    while True:
        frame = fr.next_frame()
        if frame is not None:
            msgs.append((decode_body(frame[0]), frame[1]))
            continue
        if fr.fill() == 0:
            err = fr.eof_error()
            if err is not None:
                raise err
            assert fr.buffered() == 0
            return msgs


def _frame_reader_via_pipe(data: bytes) -> List[Msg]:
    def read(fd: int) -> List[Msg]:
        with os.fdopen(fd, "rb", buffering=0) as f:
            return _read_all_frame_reader(f)

    return _through_pipe(data, 65536 + 7, read)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_vector_frame_reader(vector: dict, chunk: int) -> None:
    data = base64.b64decode(vector["input"])
    if "error" in vector:
        with pytest.raises(FramingError) as ei:
            _read_all_frame_reader(_Trickle(data, chunk))
        assert ei.value.kind == vector["error"], ei.value
    else:
        assert _read_all_frame_reader(_Trickle(data, chunk)) == _expected(vector)


def test_frame_reader_matches_read_frame() -> None:
    att = bytes(range(256)) * 3
    data = (
        encode_message({"a": "naïve ☃"}, att)
        + b"\r\n\n"  # blank lines between frames
        + b"Content-Length: 2\nCkptd-Attachment-Length: 1\n\n{}Z"  # bare newlines
        + b"content-length:  7 \r\nContent-Type: x\r\n\r\n[1,2,3]"  # other spellings, other headers
        + encode_message({"b": 2}, b"")
    )
    expected = [({"a": "naïve ☃"}, att), ({}, b"Z"), ([1, 2, 3], None), ({"b": 2}, b"")]
    assert _read_all_sync(io.BytesIO(data)) == expected
    for chunk in (1, 2, 3, 64, len(data)):
        assert _read_all_frame_reader(_Trickle(data, chunk)) == expected


def test_frame_reader_header_errors() -> None:
    for data, kind in (
        (b"Content-Length: 2\r\n", "eof"),
        (b"Content-Len", "eof"),
        (b"Content-Length: 5\r\n\r\n{}", "eof"),
        (b"garbage\r\n\r\n{}", "header"),
        (b"Content-Length: +2\r\n\r\n{}", "header"),
        (b"X" * MAX_HEADER_LINE, "header"),
        (b"X-A: 1\r\n" * 65 + b"\r\n", "header"),
    ):
        with pytest.raises(FramingError) as ei:
            _read_all_frame_reader(_Trickle(data, 1000))
        assert ei.value.kind == kind, (data[:40], ei.value)
    # a header line of exactly MAX_HEADER_LINE bytes (with its line end) is accepted
    line = b"X-Pad: " + b"p" * (MAX_HEADER_LINE - 9) + b"\r\n"
    assert len(line) == MAX_HEADER_LINE
    assert _read_all_frame_reader(_Trickle(line + b"Content-Length: 2\r\n\r\n{}", 100)) == [({}, None)]


def test_frame_reader_large_frames_over_pipe() -> None:
    att = os.urandom(5 * 1024 * 1024 + 3)
    data = encode_message({"id": 1}, att) + encode_message({"id": 2}) + encode_message({"id": 3}, att[:70000])
    assert _frame_reader_via_pipe(data) == [({"id": 1}, att), ({"id": 2}, None), ({"id": 3}, att[:70000])]


def test_decode_body_fast_path_agrees_with_json() -> None:
    for text in ('{"a":[1,2.5,"x",null,true]}', ' {"a":1} ', "[]\n", '"\\u00e9"', "1e400", "-Infinity"):
        assert decode_body(text.encode()) == json.loads(text)
    for bad in (b"{bad}", b"", b"[1] [2]", b"\xff"):
        with pytest.raises(FramingError) as ei:
            decode_body(bad)
        assert ei.value.kind == "json"


def test_encode_message_is_json_dumps() -> None:
    msg = {"jsonrpc": "2.0", "id": 3, "method": "m", "params": {"s": "naïve ☃ 𝄞", "f": 1.5, "n": None, "l": [True]}}
    body = encode_message(msg).split(b"\r\n\r\n", 1)[1]
    assert body == json.dumps(msg, separators=(",", ":")).encode("ascii")
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError, match="Circular"):
        encode_message({"params": cyclic})
    with pytest.raises(TypeError):
        encode_message({"params": object()})
