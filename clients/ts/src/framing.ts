/**
 * Stdio framing: LSP `Content-Length` frames plus ckptd's `Ckptd-Attachment-Length` extension.
 *
 * ```
 * Content-Length: N\r\n
 * [Ckptd-Attachment-Length: M\r\n]
 * [any other header\r\n]
 * \r\n
 * <N bytes of UTF-8 JSON><M raw bytes>
 * ```
 *
 * {@link FrameReader} is push-based: feed it the Buffer chunks of a stream as they arrive and it
 * returns the complete frames. It keeps a list of chunks and copies the bytes of a body or an
 * attachment at most once (zero times when they sit inside one chunk), so 100 KB attachments cost
 * one `Buffer.concat`, never a per-byte loop.
 */

/** One decoded frame: the JSON body bytes and, when the frame had the header, its attachment. */
export interface Frame {
  /** The JSON body, exactly `Content-Length` bytes. */
  body: Buffer;
  /** The attachment bytes, or `null` when the frame carried no `Ckptd-Attachment-Length` header. */
  attachment: Buffer | null;
}

/** Why a frame could not be read: a malformed header block, or the stream ended mid-frame. */
export type FramingErrorKind = "header" | "eof";

/** A frame could not be read. `kind` matches the error kinds of `testdata/framing.json`. */
export class FramingError extends Error {
  readonly kind: FramingErrorKind;
  constructor(kind: FramingErrorKind, message: string) {
    super(message);
    this.name = "FramingError";
    this.kind = kind;
  }
}

const CONTENT_LENGTH = "content-length";
const ATTACHMENT_LENGTH = "ckptd-attachment-length";
/** A header block larger than this (without its terminating empty line) is a header error. */
export const MAX_HEADER_BYTES = 64 * 1024;
const DIGITS = /^[0-9]+$/;
const LF = 0x0a;
const CR = 0x0d;

interface Header {
  contentLength: number;
  attachmentLength: number | null;
}

/**
 * Finds the end of the header block at the start of `buf` (the first empty line, `\n` or `\r\n`),
 * scanning line ends with `indexOf`. Returns the index just past it, or -1 if it is not complete.
 */
function headerEnd(buf: Buffer): number {
  let pos = 0;
  for (;;) {
    const nl = buf.indexOf(LF, pos);
    if (nl < 0) return -1;
    // The line is buf[pos, nl) minus an optional trailing \r. Empty line = end of the header block.
    const len = nl - pos;
    if (len === 0 || (len === 1 && buf[pos] === CR)) return nl + 1;
    pos = nl + 1;
  }
}

function parseLength(name: string, value: string, max: number): number {
  if (!DIGITS.test(value)) {
    throw new FramingError("header", `${name}: ${JSON.stringify(value)} is not a non-negative integer`);
  }
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n > max) {
    throw new FramingError("header", `${name}: ${value} is too large`);
  }
  return n;
}

/** Parses a complete header block (without the terminating empty line's successor bytes). */
function parseHeader(block: string, maxLength: number): Header {
  let contentLength: number | null = null;
  let attachmentLength: number | null = null;
  for (const rawLine of block.split("\n")) {
    const line = rawLine.endsWith("\r") ? rawLine.slice(0, -1) : rawLine;
    if (line === "") continue; // the terminating empty line
    const colon = line.indexOf(":");
    if (colon <= 0) {
      throw new FramingError("header", `malformed header line ${JSON.stringify(line.slice(0, 80))}`);
    }
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === CONTENT_LENGTH) {
      const n = parseLength("Content-Length", value, maxLength);
      if (contentLength !== null && contentLength !== n) {
        throw new FramingError("header", "conflicting Content-Length headers");
      }
      contentLength = n;
    } else if (name === ATTACHMENT_LENGTH) {
      const n = parseLength("Ckptd-Attachment-Length", value, maxLength);
      if (attachmentLength !== null && attachmentLength !== n) {
        throw new FramingError("header", "conflicting Ckptd-Attachment-Length headers");
      }
      attachmentLength = n;
    }
    // Content-Type and any other header: ignored.
  }
  if (contentLength === null) {
    throw new FramingError("header", "header block without Content-Length");
  }
  return { contentLength, attachmentLength };
}

export interface FrameReaderOptions {
  /** Largest body or attachment accepted, in bytes (default: the largest Buffer Node can make). */
  maxLength?: number;
}

/**
 * Incremental frame reader. `push(chunk)` returns every frame completed by that chunk and throws
 * {@link FramingError} (`header`) on a malformed header block; `end()` throws (`eof`) when the
 * stream stopped inside a frame. After an error the reader must not be used again.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private header: Header | null = null;
  private readonly maxLength: number;

  constructor(options: FrameReaderOptions = {}) {
    // buffer.constants.MAX_LENGTH without importing node:buffer's constants at type level.
    this.maxLength = options.maxLength ?? 2 ** 32;
  }

  /** Bytes received but not yet returned as part of a frame. */
  get bufferedBytes(): number {
    return this.buffered;
  }

  /** Feeds one chunk; returns the frames it completed (often none, sometimes several). */
  push(chunk: Uint8Array): Frame[] {
    if (chunk.length > 0) {
      this.chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      this.buffered += chunk.length;
    }
    const frames: Frame[] = [];
    for (;;) {
      if (this.header === null && !this.readHeader()) break;
      const h = this.header!;
      const need = h.contentLength + (h.attachmentLength ?? 0);
      if (this.buffered < need) break;
      const body = this.take(h.contentLength);
      const attachment = h.attachmentLength === null ? null : this.take(h.attachmentLength);
      this.header = null;
      frames.push({ body, attachment });
    }
    return frames;
  }

  /** Signals the end of the stream. Throws `eof` if a frame was cut short. */
  end(): void {
    if (this.header !== null) {
      const h = this.header;
      throw new FramingError(
        "eof",
        `stream ended inside a frame: ${this.buffered} of ${h.contentLength + (h.attachmentLength ?? 0)} body+attachment bytes received`,
      );
    }
    if (this.buffered > 0) {
      // Trailing blank lines between frames are harmless; anything else is a cut-off header.
      const rest = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.buffered);
      if (rest.some((b) => b !== CR && b !== LF)) {
        throw new FramingError("eof", `stream ended inside a header block (${this.buffered} bytes)`);
      }
      this.chunks = [];
      this.buffered = 0;
    }
  }

  /** Tries to parse the header block at the front of the buffer; true once `this.header` is set. */
  private readHeader(): boolean {
    if (!this.skipBlankLines()) return false;
    let first = this.chunks[0]!;
    let end = headerEnd(first);
    // The header block straddles chunks: merge the first chunks until it is complete. Header
    // blocks are small, so this copies at most one chunk per boundary.
    while (end < 0 && this.chunks.length > 1 && first.length <= MAX_HEADER_BYTES) {
      first = Buffer.concat([first, this.chunks[1]!]);
      this.chunks.splice(0, 2, first);
      end = headerEnd(first);
    }
    if (end < 0) {
      if (this.buffered > MAX_HEADER_BYTES) {
        throw new FramingError("header", `header block longer than ${MAX_HEADER_BYTES} bytes without an empty line`);
      }
      return false;
    }
    if (end > MAX_HEADER_BYTES) {
      throw new FramingError("header", `header block longer than ${MAX_HEADER_BYTES} bytes`);
    }
    // Headers are ASCII; latin1 keeps every byte as one char so garbage is reported, not mangled.
    const block = first.toString("latin1", 0, end);
    const header = parseHeader(block, this.maxLength);
    this.skip(end);
    this.header = header;
    return true;
  }

  /**
   * Skips empty lines before a header block (a stray CRLF between frames is harmless). Returns
   * false when more bytes are needed to decide.
   */
  private skipBlankLines(): boolean {
    for (;;) {
      if (this.buffered === 0) return false;
      const first = this.chunks[0]!;
      if (first[0] === LF) {
        this.skip(1);
        continue;
      }
      if (first[0] === CR) {
        if (this.buffered < 2) return false;
        const second = first.length > 1 ? first[1] : this.chunks[1]![0];
        if (second === LF) {
          this.skip(1);
          this.skip(1);
          continue;
        }
      }
      return true;
    }
  }

  /** Drops n bytes from the front (n ≤ first chunk's length). */
  private skip(n: number): void {
    const first = this.chunks[0]!;
    if (n === first.length) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.buffered -= n;
  }

  /** Removes and returns the first n buffered bytes (n ≤ buffered): zero-copy within one chunk. */
  private take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    const first = this.chunks[0]!;
    if (first.length >= n) {
      const out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      this.buffered -= n;
      return out;
    }
    // Collect whole chunks until n bytes are covered, then concat once.
    let count = 0;
    let got = 0;
    while (got < n) got += this.chunks[count++]!.length;
    const parts = this.chunks.splice(0, count);
    const over = got - n;
    if (over > 0) {
      const last = parts[parts.length - 1]!;
      parts[parts.length - 1] = last.subarray(0, last.length - over);
      this.chunks.unshift(last.subarray(last.length - over));
    }
    this.buffered -= n;
    return Buffer.concat(parts, n);
  }
}

/**
 * Encodes one frame. Returns the header+body as one Buffer and the attachment separately (not
 * copied), so a writer can hand both to a corked stream.
 */
export function encodeFrame(body: string | Uint8Array, attachment?: Uint8Array | null): [Buffer] | [Buffer, Uint8Array] {
  const bodyBuf = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  let head = `Content-Length: ${bodyBuf.length}\r\n`;
  if (attachment != null) head += `Ckptd-Attachment-Length: ${attachment.byteLength}\r\n`;
  head += "\r\n";
  const headBuf = Buffer.from(head, "latin1");
  const first = Buffer.concat([headBuf, bodyBuf], headBuf.length + bodyBuf.length);
  return attachment != null && attachment.byteLength > 0 ? [first, attachment] : [first];
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Decodes a frame body as strict UTF-8 JSON (invalid UTF-8 is an error, not U+FFFD). */
export function parseBody(body: Uint8Array): unknown {
  return JSON.parse(utf8.decode(body));
}
