/** The frame reader/writer against testdata/framing.json and round trips. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { FrameReader, FramingError, MAX_HEADER_BYTES, encodeFrame, parseBody, type Frame } from "ckptd";

import { repoRoot } from "./support/helpers.js";

interface Vector {
  name: string;
  input: string;
  messages?: { json: unknown; attachment: string | null }[];
  error?: "header" | "eof";
}

const vectors: Vector[] = (JSON.parse(readFileSync(join(repoRoot(), "testdata", "framing.json"), "utf8")) as { vectors: Vector[] }).vectors;

/** Splits buf into chunks of the given sizes (cycled). */
function split(buf: Buffer, sizes: number[]): Buffer[] {
  const out: Buffer[] = [];
  let i = 0;
  let k = 0;
  while (i < buf.length) {
    const n = Math.max(1, sizes[k++ % sizes.length]!);
    out.push(buf.subarray(i, i + n));
    i += n;
  }
  return out;
}

/** Reads every frame of the chunks; returns the frames, or the error thrown. */
function readAll(chunks: Buffer[]): { frames: Frame[]; error: FramingError | null } {
  const r = new FrameReader();
  const frames: Frame[] = [];
  try {
    for (const c of chunks) frames.push(...r.push(c));
    r.end();
  } catch (e) {
    if (!(e instanceof FramingError)) throw e;
    return { frames, error: e };
  }
  return { frames, error: null };
}

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const splits: [string, (b: Buffer) => Buffer[]][] = [
  ["whole", (b) => [b]],
  ["byte by byte", (b) => split(b, [1])],
  ["odd chunks", (b) => split(b, [3, 7, 2, 11])],
  [
    "random chunks",
    (b) => {
      const rnd = seeded(b.length);
      return split(b, Array.from({ length: 64 }, () => 1 + Math.floor(rnd() * 40)));
    },
  ],
];

describe("testdata/framing.json", () => {
  it("has vectors", () => {
    assert.ok(vectors.length >= 10, `only ${vectors.length} vectors`);
  });
  for (const v of vectors) {
    for (const [how, chunker] of splits) {
      it(`${v.name} (${how})`, () => {
        const { frames, error } = readAll(chunker(Buffer.from(v.input, "base64")));
        if (v.error !== undefined) {
          assert.ok(error !== null, `expected a ${v.error} error, got ${frames.length} frame(s)`);
          assert.equal(error.kind, v.error, error.message);
          return;
        }
        assert.equal(error, null, error?.message);
        const got = frames.map((f) => ({
          json: parseBody(f.body),
          attachment: f.attachment === null ? null : Buffer.from(f.attachment).toString("base64"),
        }));
        assert.deepEqual(got, v.messages);
      });
    }
  }
});

describe("FrameReader", () => {
  it("reads frames written by encodeFrame, with and without attachments", () => {
    const att = Buffer.alloc(100 * 1024);
    for (let i = 0; i < att.length; i++) att[i] = (i * 31) & 0xff;
    const msgs: [unknown, Uint8Array | null][] = [
      [{ jsonrpc: "2.0", id: 1, result: { s: "naïve ☃ 𝄞" } }, null],
      [{ jsonrpc: "2.0", id: 2, result: null }, new Uint8Array(0)],
      [{ jsonrpc: "2.0", id: 3, result: {} }, att],
      [{ jsonrpc: "2.0", method: "checkpoint/saved", params: { seq: 1 } }, Buffer.from("Content-Length: 3\r\n\r\n{}")],
    ];
    const bytes = Buffer.concat(msgs.flatMap(([j, a]) => encodeFrame(JSON.stringify(j), a)));
    for (const [, chunker] of splits) {
      const { frames, error } = readAll(chunker(bytes));
      assert.equal(error, null);
      assert.equal(frames.length, msgs.length);
      frames.forEach((f, i) => {
        assert.deepEqual(parseBody(f.body), msgs[i]![0]);
        const want = msgs[i]![1];
        if (want === null) assert.equal(f.attachment, null);
        else assert.ok(f.attachment !== null && Buffer.from(want).equals(f.attachment));
      });
    }
  });

  it("accepts bare \\n line ends and ignores unknown headers", () => {
    const body = '{"a":1}';
    const r = new FrameReader();
    const frames = r.push(Buffer.from(`X-Foo: bar\nContent-Length: ${body.length}\nCkptd-Attachment-Length: 2\n\n${body}hi`));
    assert.equal(frames.length, 1);
    assert.deepEqual(parseBody(frames[0]!.body), { a: 1 });
    assert.equal(frames[0]!.attachment?.toString(), "hi");
  });

  it("rejects garbage header lines and oversized header blocks", () => {
    assert.throws(() => new FrameReader().push(Buffer.from("garbage\r\nContent-Length: 2\r\n\r\n{}")), (e: unknown) => e instanceof FramingError && e.kind === "header");
    assert.throws(
      () => new FrameReader().push(Buffer.alloc(MAX_HEADER_BYTES + 10, 0x41)),
      (e: unknown) => e instanceof FramingError && e.kind === "header",
    );
  });

  it("reports a header cut off by EOF as eof, and tolerates trailing blank lines", () => {
    const r = new FrameReader();
    r.push(Buffer.from("Content-Len"));
    assert.throws(() => r.end(), (e: unknown) => e instanceof FramingError && e.kind === "eof");
    const ok = new FrameReader();
    assert.equal(ok.push(Buffer.from('Content-Length: 2\r\n\r\n{}\r\n')).length, 1);
    ok.end();
  });

  it("copies each 100 KB attachment at most once (in 64 KB pipe chunks)", () => {
    const att = Buffer.alloc(100 * 1024, 7);
    const frame = Buffer.concat(encodeFrame(JSON.stringify({ jsonrpc: "2.0", id: 1, result: { ok: true } }), att));
    const n = 2000; // 200 MB through the reader
    const stream = Buffer.concat(Array.from({ length: 20 }, () => frame));
    const chunks = split(stream, [65536]);
    const r = new FrameReader();
    // Count the bytes the reader copies (every copy it makes is a Buffer.concat), not the time:
    // a reader that re-copied its pending bytes per chunk would copy several times the stream.
    const concat = Buffer.concat;
    let copied = 0;
    Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
      const b = concat(list, total);
      copied += b.length;
      return b;
    }) as typeof Buffer.concat;
    let count = 0;
    try {
      for (let rep = 0; rep < n / 20; rep++) for (const c of chunks) count += r.push(c).length;
    } finally {
      Buffer.concat = concat;
    }
    assert.equal(count, n);
    assert.ok(copied <= n * frame.length * 1.05, `copied ${copied} bytes for ${n * frame.length} read`);
  });
});

describe("encodeFrame", () => {
  it("counts UTF-8 bytes and writes the attachment header only when asked", () => {
    const [head] = encodeFrame('{"s":"é"}');
    assert.equal(head.toString("latin1").split("\r\n")[0], "Content-Length: 10");
    assert.ok(!head.toString().includes("Ckptd-Attachment-Length"));
    const parts = encodeFrame("{}", new Uint8Array(0));
    assert.equal(parts.length, 1);
    assert.ok(parts[0].toString().includes("Ckptd-Attachment-Length: 0\r\n\r\n{}"));
  });
});
