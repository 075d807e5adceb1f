/** Unit tests of the LangGraph saver's pure parts (no daemon): serialization fast paths, versions. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { DeltaSnapshot, JsonPlusSerializer } from "@langchain/langgraph-checkpoint";
import { _internals } from "ckptd/langgraph";

const { isPlainJson, jsonTextIsInert, jsonValueIsInert, nextVersion } = _internals;
const serde = new JsonPlusSerializer();
const text = (b: Uint8Array) => new TextDecoder().decode(b);

describe("LangGraph saver: serialization fast paths", () => {
  const plain: unknown[] = [
    null,
    0,
    -1.5,
    "naïve ☃ 𝄞 \u0000 \"quoted\" \\",
    true,
    [],
    {},
    { messages: [{ role: "user", content: "hi" }, { role: "ai", content: "" }], n: 3, nested: { ok: true, nil: null } },
    [[1, [2, [3]]], { a: [] }],
    Object.assign(Object.create(null), { a: 1 }),
  ];
  const notPlain: unknown[] = [
    undefined,
    { a: undefined },
    [1, undefined],
    // eslint-disable-next-line no-sparse-arrays
    [1, , 3],
    new Date(0),
    new Map([[1, 2]]),
    new Set([1]),
    new Uint8Array([1, 2]),
    new DeltaSnapshot([1]),
    { f: () => 1 },
    10n,
    { toJSON: () => "x" },
    new (class Msg {
      content = "hi";
    })(),
  ];

  it("isPlainJson accepts exactly what JsonPlus writes as plain JSON", async () => {
    for (const v of plain) {
      assert.equal(isPlainJson(v), true, `plain: ${String(JSON.stringify(v))}`);
      const [type, bytes] = await serde.dumpsTyped(v);
      assert.equal(type, "json");
      assert.equal(text(bytes), JSON.stringify(v), "same bytes as JsonPlusSerializer");
    }
    for (const v of notPlain) assert.equal(isPlainJson(v), false, `not plain: ${String(v)}`);
  });

  it("isPlainJson rejects cycles and very deep values (they go through serde)", () => {
    const a: Record<string, unknown> = {};
    a["self"] = a;
    assert.equal(isPlainJson(a), false);
    let deep: unknown = 1;
    for (let i = 0; i < 2000; i++) deep = [deep];
    assert.equal(isPlainJson(deep), false);
  });

  it("inert JSON parses to exactly what JsonPlus's reviver returns", async () => {
    for (const v of plain) {
      const t = JSON.stringify(v);
      assert.equal(jsonTextIsInert(t), true);
      assert.deepEqual(JSON.parse(t), await serde.loadsTyped("json", t));
    }
    for (const v of [new Map([[1, 2]]), new DeltaSnapshot([1]), { u: undefined }, [1, undefined], { d: new Uint8Array([1]) }]) {
      const [, bytes] = await serde.dumpsTyped(v);
      assert.equal(jsonTextIsInert(text(bytes)), false, text(bytes));
      assert.equal(jsonValueIsInert(JSON.parse(text(bytes))), false);
    }
    assert.equal(jsonTextIsInert('{"__proto__": {"x": 1}}'), false);
    assert.equal(jsonValueIsInert(JSON.parse('{"a": {"__proto__": 1}}')), false);
    assert.equal(jsonTextIsInert(JSON.stringify({ content: 'say "lc" twice' })), true, "escaped quotes in strings are not keys");
  });
});

describe("LangGraph saver: getNextVersion", () => {
  it("numbers: increasing, greater than floor(current) + 1, unique", () => {
    const seen = new Set<number>();
    let v: number | undefined;
    for (let i = 0; i < 100; i++) {
      const next = nextVersion(v) as number;
      assert.equal(typeof next, "number");
      if (v !== undefined) assert.ok(next > v);
      assert.equal(Math.floor(next), (v === undefined ? 0 : Math.floor(v)) + 1);
      seen.add(next);
      v = next;
    }
    // Two forks from the same version get different versions.
    const forks = new Set(Array.from({ length: 1000 }, () => nextVersion(7)));
    assert.equal(forks.size, 1000);
  });

  it("strings continue in the Python saver's format", () => {
    const v = nextVersion("00000000000000000000000000000007.0000000000000005") as string;
    assert.match(v, /^0{31}8\.\d{16}$/);
    assert.ok(v > "00000000000000000000000000000007.9999999999999999");
  });
});
