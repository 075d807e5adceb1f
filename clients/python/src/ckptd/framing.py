"""ckptd's stdio framing: LSP ``Content-Length`` frames plus the ``Ckptd-Attachment-Length``
extension (raw bytes that follow the JSON body and belong to the same message).

``read_frame`` / ``read_frame_async`` read one frame from a buffered binary stream and return
``(body, attachment)`` (``attachment`` is ``None`` when the frame has no attachment header, ``b""``
for a zero-length attachment) or ``None`` at a clean end of stream (before any byte of a frame).
They raise :class:`~ckptd.errors.FramingError` with ``kind`` ``"header"`` for a bad header
block and ``"eof"`` when the stream ends inside a frame.

Reads are exact-count reads on the buffered stream (one ``read(n)`` per body/attachment), never
byte loops, so large attachments cost one copy.

:class:`FrameReader` is the sync client's reader: it keeps its own buffer over a raw stream and
separates "parse a complete frame from the buffer" (:meth:`FrameReader.next_frame`, no I/O) from
"read more" (:meth:`FrameReader.fill`, one ``readinto``), so that a reader can wait for data with
``poll`` (and give up on a timeout) without ever losing a partial frame, and so that the stream
can pass from one reading thread to another between frames.
"""

from __future__ import annotations

import asyncio
import json
import json.encoder
import json.scanner
import re
from typing import Any, Callable, List, Optional, Tuple, cast

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
    "FrameReader",
]

#: Longest header line accepted (bytes, including the line end).
MAX_HEADER_LINE = 8192
#: Most header lines accepted in one block.
MAX_HEADER_LINES = 64

_CONTENT_LENGTH = b"content-length"
_ATTACHMENT_LENGTH = b"ckptd-attachment-length"

Frame = Tuple[bytes, Optional[bytes]]

# JSON for every message, without json.dumps' per-call setup (it builds a JSONEncoder, and the
# encoder its C encoder, on each call). The same output: compact, ASCII-only.
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"))
_c_encode: Optional[Callable[[Any, int], Any]] = None
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's _json
if _c_make_encoder is not None:
    try:
        # no circular-reference check (markers=None): that state is not shareable between threads;
        # a cyclic message fails with RecursionError, then goes through the checked encoder
        _c_encode = _c_make_encoder(
            None, _JSON_ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
        )
    except TypeError:  # pragma: no cover - another signature
        _c_encode = None


def encode_json(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"))``: the same text (compact, ASCII-only, NaN
    allowed), the same errors (TypeError, ValueError for a circular reference), without building
    an encoder per call."""
    if _c_encode is not None:
        try:
            return "".join(_c_encode(value, 0))
        except RecursionError:
            pass
    return _JSON_ENCODER.encode(value)


_encode_json = encode_json


_scan_json: Callable[[str, int], Tuple[Any, int]] = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))

# The header block ckptd writes; anything else goes through the general parser.
_DAEMON_HEADERS = re.compile(rb"Content-Length: ([0-9]{1,18})\r\n(?:Ckptd-Attachment-Length: ([0-9]{1,18})\r\n)?\r\n")


def encode_frame(body: bytes, attachment: Optional[bytes] = None) -> bytes:
    """Returns one complete frame (headers + body + attachment) as a single bytes object."""
    if attachment is None:
        return b"".join((b"Content-Length: %d\r\n\r\n" % len(body), body))
    return b"".join(
        (b"Content-Length: %d\r\nCkptd-Attachment-Length: %d\r\n\r\n" % (len(body), len(attachment)), body, attachment)
    )


def encode_message(message: Any, attachment: Optional[bytes] = None) -> bytes:
    """JSON-encodes ``message`` (compact, ASCII-only) and frames it with ``attachment``."""
    body = _encode_json(message).encode("ascii")
    if attachment is None:
        return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
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
        text = body.decode("utf-8")
        try:
            value, end = _scan_json(text, 0)  # json.loads without its wrapper layers
            if end == len(text):
                return value
        except (StopIteration, ValueError):
            pass
        return json.loads(text)  # whitespace around the value, or an error to report
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


#: The FrameReader's usual buffer size: a typical frame arrives with one read.
_READ_CHUNK = 256 * 1024


class FrameReader:
    """Frames from a raw (unbuffered) binary stream with ``readinto`` (e.g. a pipe's ``FileIO``),
    with its own buffer. Not thread-safe: one reader at a time (the sync client hands it from
    thread to thread under a lock).

    :meth:`next_frame` parses the next complete frame out of the buffer without any I/O (``None``
    when the buffer holds none), :meth:`fill` reads once more. Accepts exactly what
    :func:`read_frame` accepts and raises the same :class:`FramingError` kinds.
    """

    __slots__ = ("raw", "_buf", "_start", "_end", "_need")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self._buf = bytearray(_READ_CHUNK)
        self._start = 0  # first unparsed byte
        self._end = 0  # end of the data read so far
        self._need = 0  # once the next frame's headers are parsed: its whole length; else 0

    def buffered(self) -> int:
        """Bytes read but not yet returned as frames."""
        return self._end - self._start

    def next_frame(self) -> Optional[Frame]:
        """The next complete frame in the buffer, or ``None`` if more bytes are needed."""
        start, end = self._start, self._end
        if end - start < self._need or start == end:
            return None
        buf = self._buf
        m = _DAEMON_HEADERS.match(buf, start, end)
        if m is not None:
            content_length = int(m[1])
            attachment_length = int(m[2]) if m[2] is not None else None
            pos = m.end()
        else:
            content_length, attachment_length, pos = self._parse_headers()
            if pos < 0:
                return None
            start = self._start
        total = pos - start + content_length + (attachment_length or 0)
        if end - start < total:
            self._need = total
            return None
        self._need = 0
        with memoryview(buf) as mv:
            body_end = pos + content_length
            body = bytes(mv[pos:body_end])
            attachment: Optional[bytes] = None
            if attachment_length is not None:
                attachment = bytes(mv[body_end : body_end + attachment_length])
        if start + total == end:
            self._start = self._end = 0
            if len(buf) > 4 * _READ_CHUNK:  # do not keep a huge buffer around after a big frame
                self._buf = bytearray(_READ_CHUNK)
        else:
            self._start = start + total
        return body, attachment

    def _parse_headers(self) -> Tuple[int, Optional[int], int]:
        """Parses the header block at the start of the buffer (skipping blank lines before it):
        (content_length, attachment_length, offset of the body), offset -1 if incomplete."""
        buf, start, end = self._buf, self._start, self._end
        pos = start
        lines: List[bytes] = []
        while True:
            nl = buf.find(b"\n", pos, min(end, pos + MAX_HEADER_LINE))
            if nl < 0:
                if end - pos >= MAX_HEADER_LINE:
                    raise FramingError("header", "header line longer than %d bytes" % MAX_HEADER_LINE)
                return 0, None, -1
            stop = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl  # 13: "\r"
            if stop == pos:  # blank line
                pos = nl + 1
                if not lines:
                    self._start = pos  # blank lines between frames are skipped
                    continue
                break
            lines.append(bytes(buf[pos:stop]))
            pos = nl + 1
            if len(lines) > MAX_HEADER_LINES:
                raise FramingError("header", "more than %d header lines" % MAX_HEADER_LINES)
        content_length, attachment_length = parse_header_lines(lines)
        return content_length, attachment_length, pos

    def fill(self) -> int:
        """Reads once from the (blocking) stream into the buffer: blocks until there is some data;
        returns the byte count, 0 at EOF."""
        buf, start, end = self._buf, self._start, self._end
        want = max(self._need, end - start + 16 * 1024)
        if start + want > len(buf):  # not enough room after start: move the live bytes / grow
            live = end - start
            if want <= len(buf):
                buf[:live] = buf[start:end]
            else:
                nbuf = bytearray(max(want, _READ_CHUNK))
                nbuf[:live] = buf[start:end]
                self._buf = buf = nbuf
            self._start, self._end = start, end = 0, live
        with memoryview(buf) as mv:
            n: Optional[int] = self.raw.readinto(mv[end:])
        if n is None:
            raise BlockingIOError("FrameReader needs a blocking stream")
        self._end = end + n
        return n

    def eof_error(self) -> Optional[FramingError]:
        """At EOF: ``None`` if the stream ended cleanly between frames, else the error for the
        frame it cut short."""
        if self._end == self._start:
            return None
        if not self._need:
            return FramingError("eof", "stream ended inside a frame header")
        return FramingError(
            "eof", "stream ended inside a frame (%d of %d bytes)" % (self._end - self._start, self._need)
        )
