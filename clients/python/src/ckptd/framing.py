"""ckptd's stdio framing: LSP ``Content-Length`` frames plus the ``Ckptd-Attachment-Length``
extension (raw bytes that follow the JSON body and belong to the same message).

``read_frame`` / ``read_frame_async`` read one frame from a buffered binary stream and return
``(body, attachment)`` (``attachment`` is ``None`` when the frame has no attachment header, ``b""``
for a zero-length attachment) or ``None`` at a clean end of stream (before any byte of a frame).
They raise :class:`~ckptd.errors.FramingError` with ``kind`` ``"header"`` for a bad header
block and ``"eof"`` when the stream ends inside a frame.

Reads are exact-count reads on the buffered stream (one ``read(n)`` per body/attachment), never
byte loops, so large attachments cost one copy.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, List, Optional, Tuple

from .errors import FramingError

__all__ = [
    "MAX_HEADER_LINE",
    "encode_frame",
    "encode_message",
    "parse_header_lines",
    "read_frame",
    "read_message",
    "read_frame_async",
    "read_message_async",
    "decode_body",
]

#: Longest header line accepted (bytes, including the line end).
MAX_HEADER_LINE = 8192
#: Most header lines accepted in one block.
MAX_HEADER_LINES = 64

_CONTENT_LENGTH = b"content-length"
_ATTACHMENT_LENGTH = b"ckptd-attachment-length"

Frame = Tuple[bytes, Optional[bytes]]


def encode_frame(body: bytes, attachment: Optional[bytes] = None) -> bytes:
    """Returns one complete frame (headers + body + attachment) as a single bytes object."""
    if attachment is None:
        return b"".join((b"Content-Length: %d\r\n\r\n" % len(body), body))
    return b"".join(
        (b"Content-Length: %d\r\nCkptd-Attachment-Length: %d\r\n\r\n" % (len(body), len(attachment)), body, attachment)
    )


def encode_message(message: Any, attachment: Optional[bytes] = None) -> bytes:
    """JSON-encodes ``message`` (compact, ASCII-only) and frames it with ``attachment``."""
    body = json.dumps(message, separators=(",", ":")).encode("ascii")
    return encode_frame(body, attachment)


def _parse_length(name: bytes, value: bytes) -> int:
    v = value.strip()
    # bytes.isdigit() is ASCII-only: no sign, no spaces, no underscores, no other digits.
    if not v or not v.isdigit() or len(v) > 18:
        raise FramingError("header", "invalid %s: %r" % (name.decode("ascii", "replace"), v.decode("latin-1")))
    return int(v)


def parse_header_lines(lines: List[bytes]) -> Tuple[int, Optional[int]]:
    """Parses a header block (lines without their line ends) into (content_length, attachment_length)."""
    content_length: Optional[int] = None
    attachment_length: Optional[int] = None
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            raise FramingError("header", "garbage header line: %r" % line[:80].decode("latin-1"))
        key = name.strip().lower()
        if key == _CONTENT_LENGTH:
            content_length = _parse_length(b"Content-Length", value)
        elif key == _ATTACHMENT_LENGTH:
            attachment_length = _parse_length(b"Ckptd-Attachment-Length", value)
        # any other header (Content-Type, ...) is ignored
    if content_length is None:
        raise FramingError("header", "header block without Content-Length")
    return content_length, attachment_length


def _strip_eol(line: bytes) -> bytes:
    # the caller guarantees line ends in b"\n"; a preceding b"\r" is optional
    if line.endswith(b"\r\n"):
        return line[:-2]
    return line[:-1]


def read_frame(stream: Any) -> Optional[Frame]:
    """Reads one frame from a blocking buffered binary stream (``readline`` + ``read``)."""
    lines: List[bytes] = []
    started = False
    while True:
        line = stream.readline(MAX_HEADER_LINE)
        if not line:
            if started:
                raise FramingError("eof", "stream ended inside a frame header")
            return None
        started = True
        if not line.endswith(b"\n"):
            if len(line) >= MAX_HEADER_LINE:
                raise FramingError("header", "header line longer than %d bytes" % MAX_HEADER_LINE)
            raise FramingError("eof", "stream ended inside a frame header")
        text = _strip_eol(line)
        if not text:
            if not lines:
                continue  # tolerate blank lines between frames
            break
        lines.append(text)
        if len(lines) > MAX_HEADER_LINES:
            raise FramingError("header", "more than %d header lines" % MAX_HEADER_LINES)
    content_length, attachment_length = parse_header_lines(lines)
    body = stream.read(content_length) if content_length else b""
    if len(body) != content_length:
        raise FramingError("eof", "stream ended inside a frame body (%d of %d bytes)" % (len(body), content_length))
    attachment: Optional[bytes] = None
    if attachment_length is not None:
        attachment = stream.read(attachment_length) if attachment_length else b""
        if len(attachment) != attachment_length:
            raise FramingError(
                "eof", "stream ended inside an attachment (%d of %d bytes)" % (len(attachment), attachment_length)
            )
    return body, attachment


def decode_body(body: bytes) -> Any:
    """Parses a frame body as UTF-8 JSON; raises FramingError(kind="json") if it is not."""
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FramingError("json", "frame body is not valid UTF-8 JSON: %s" % e) from None


def read_message(stream: Any) -> Optional[Tuple[Any, Optional[bytes]]]:
    """Like :func:`read_frame` but returns the parsed JSON value with the attachment."""
    frame = read_frame(stream)
    if frame is None:
        return None
    return decode_body(frame[0]), frame[1]


async def read_frame_async(reader: "asyncio.StreamReader") -> Optional[Frame]:
    """Reads one frame from an :class:`asyncio.StreamReader` (``readline`` + ``readexactly``)."""
    lines: List[bytes] = []
    started = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial and not started:
                return None
            raise FramingError("eof", "stream ended inside a frame header") from None
        except asyncio.LimitOverrunError:
            raise FramingError("header", "header line longer than the reader's limit") from None
        started = True
        if len(line) > MAX_HEADER_LINE:
            raise FramingError("header", "header line longer than %d bytes" % MAX_HEADER_LINE)
        text = _strip_eol(line)
        if not text:
            if not lines:
                continue
            break
        lines.append(text)
        if len(lines) > MAX_HEADER_LINES:
            raise FramingError("header", "more than %d header lines" % MAX_HEADER_LINES)
    content_length, attachment_length = parse_header_lines(lines)
    try:
        body = await reader.readexactly(content_length) if content_length else b""
    except asyncio.IncompleteReadError as e:
        raise FramingError(
            "eof", "stream ended inside a frame body (%d of %d bytes)" % (len(e.partial), content_length)
        ) from None
    attachment: Optional[bytes] = None
    if attachment_length is not None:
        try:
            attachment = await reader.readexactly(attachment_length) if attachment_length else b""
        except asyncio.IncompleteReadError as e:
            raise FramingError(
                "eof", "stream ended inside an attachment (%d of %d bytes)" % (len(e.partial), attachment_length)
            ) from None
    return body, attachment


async def read_message_async(reader: "asyncio.StreamReader") -> Optional[Tuple[Any, Optional[bytes]]]:
    """Like :func:`read_frame_async` but returns the parsed JSON value with the attachment."""
    frame = await read_frame_async(reader)
    if frame is None:
        return None
    return decode_body(frame[0]), frame[1]
