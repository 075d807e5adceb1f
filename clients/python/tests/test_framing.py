"""The framing vectors of testdata/framing.json (no daemon needed), for the blocking reader over
a real pipe and a BytesIO, and for the asyncio reader."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import threading
from typing import Any, List, Optional, Tuple

import pytest

from conftest import REPO_ROOT
from ckptd.errors import FramingError
from ckptd.framing import (
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


def _via_pipe(data: bytes) -> List[Msg]:
    """Reads from a real OS pipe through a BufferedReader, written in small pieces by a thread."""
    r, w = os.pipe()

    def writer() -> None:
        try:
            with os.fdopen(w, "wb", buffering=0) as f:
                for i in range(0, len(data), 7):
                    f.write(data[i : i + 7])
        except BrokenPipeError:  # the reader stopped at a bad frame
            pass

    t = threading.Thread(target=writer)
    t.start()
    try:
        with os.fdopen(r, "rb") as f:
            return _read_all_sync(f)
    finally:
        t.join()


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
