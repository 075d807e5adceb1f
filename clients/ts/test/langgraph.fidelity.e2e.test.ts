/**
 * CkptdSaver behaves like LangGraph.js's reference savers (issue #19 points 1-4) and bounds long
 * threads with its opt-in retention (issue #24), on SQLite and PostgreSQL (CKPTD_TEST_PG_URL).
 *
 * Compared in the same test with MemorySaver, and with what SqliteSaver answers for the cases of
 * test/langgraph/sqlitesaver-cases.json, recorded once by scripts/record-sqlitesaver.mjs into
 * test/langgraph/sqlitesaver-answers.json (so that the tests never need better-sqlite3).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { MemorySaver, emptyCheckpoint, type Checkpoint, type CheckpointMetadata } from "@langchain/langgraph-checkpoint";
import type { RunnableConfig } from "@langchain/core/runnables";
import { TooLargeError } from "ckptd";
import { CkptdSaver } from "ckptd/langgraph";

import { Env } from "./support/e2e.js";
import { packageRoot, pgSchemaURL, sleep } from "./support/helpers.js";

interface ThreadCase {
  prefix: string;
  repeat: string;
  times: number;
}
type Outcome<T> = { ok: T } | { error: string };
const cases = JSON.parse(readFileSync(join(packageRoot(), "test", "langgraph", "sqlitesaver-cases.json"), "utf8")) as {
  metadata: Record<string, unknown>[];
  filters: Record<string, unknown>[];
  threadIds: ThreadCase[];
  nanMetadata: Record<string, unknown>;
};
const answers = JSON.parse(readFileSync(join(packageRoot(), "test", "langgraph", "sqlitesaver-answers.json"), "utf8")) as {
  sqliteSaver: string;
  filters: ({ filter: Record<string, unknown>; thread: string | null } & Outcome<string[]>)[];
  threadIds: (ThreadCase & { put: Outcome<boolean>; get: Outcome<string | null>; list: Outcome<string[]> })[];
  nanMetadata: Record<string, unknown>;
  getTupleConfig: { sameObject: boolean; equal: boolean; latest: RunnableConfig };
};

/** "$NaN", "$Infinity", "$-Infinity" stand for those numbers in the cases. */
function numbers(v: unknown): unknown {
  if (v === "$NaN") return NaN;
  if (v === "$Infinity") return Infinity;
  if (v === "$-Infinity") return -Infinity;
  if (Array.isArray(v)) return v.map(numbers);
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, numbers(x)]));
  return v;
}

const cfg = (thread: string, id?: string): RunnableConfig => ({ configurable: { thread_id: thread, checkpoint_ns: "", ...(id ? { checkpoint_id: id } : {}) } });
const checkpoint = (id: string): Checkpoint => ({ ...emptyCheckpoint(), id });

async function ids(it: AsyncIterable<{ checkpoint: Checkpoint }>): Promise<string[]> {
  const out: string[] = [];
  for await (const t of it) out.push(t.checkpoint.id);
  return out;
}

async function outcome<T>(f: () => Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: await f() };
  } catch (e) {
    return { error: String((e as Error)?.message ?? e) };
  }
}

/** a → b → c, b's value new on every run; its versions repeat on a replay (versions: a counter). */
function replayGraph(runs: { b: number }) {
  const S = Annotation.Root({
    value: Annotation<string>,
    log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  });
  return new StateGraph(S)
    .addNode("a", () => ({ log: ["a"] }))
    .addNode("b", () => ({ value: `run-${++runs.b}` }))
    .addNode("c", (s) => ({ log: [`c saw ${s.value}`] }))
    .addEdge(START, "a")
    .addEdge("a", "b")
    .addEdge("b", "c")
    .addEdge("c", END);
}

/** Runs the replay scenario: invoke, then invoke(null) from the checkpoint before b. */
async function replay(saver: CkptdSaver | MemorySaver) {
  const counting = (current: number | undefined) => (typeof current === "number" ? current + 1 : 1);
  saver.getNextVersion = counting as typeof saver.getNextVersion;
  const graph = replayGraph({ b: 0 }).compile({ checkpointer: saver });
  const config = { configurable: { thread_id: "replay" } };
  await graph.invoke({}, config);
  let beforeB: RunnableConfig | undefined;
  for await (const s of graph.getStateHistory(config)) if (s.next.length === 1 && s.next[0] === "b") beforeB = s.config;
  const out = await graph.invoke(null, beforeB!);
  const state = (await graph.getState(config)).values;
  const history: unknown[] = [];
  for await (const s of graph.getStateHistory(config)) history.push([s.values, s.next, (s.metadata as CheckpointMetadata).step]);
  return { out, state, history };
}

let dbs = 0;
/** The backends: db names a fresh database each time (a file of dir, or a PostgreSQL schema). */
const backends: { name: string; db: (dir: string) => string }[] = [{ name: "sqlite", db: (dir) => join(dir, `fidelity-${dbs++}.db`) }];
if ((process.env["CKPTD_TEST_PG_URL"] ?? "") !== "") {
  backends.push({ name: "postgres", db: () => pgSchemaURL()! });
} else {
  const why = "CKPTD_TEST_PG_URL is not set: the PostgreSQL run needs the throwaway cluster ./scripts/test.sh starts";
  describe("CkptdSaver fidelity (postgres)", () => {
    if (process.env["CI"] === "true") {
      it("needs PostgreSQL under CI=true", () => {
        throw new Error(why);
      });
    } else {
      it.skip(`PostgreSQL tests skipped: ${why}`, () => {});
    }
  });
}

for (const backend of backends) {
  describe(`CkptdSaver fidelity (${backend.name})`, () => {
    let env: Env;
    before(() => {
      env = new Env(backend.db);
    });
    after(async () => {
      await env?.cleanup();
    });
    const saver = (options: Record<string, unknown> = {}) => new CkptdSaver({ db: backend.db(env.dir), binary: env.binary, ...options });

    it("a replayed branch reads its own values (as MemorySaver)", async () => {
      const ours = saver();
      try {
        const got = await replay(ours);
        const want = await replay(new MemorySaver());
        assert.deepEqual(got.out, { value: "run-2", log: ["a", "c saw run-2"] });
        assert.deepEqual(got, want);
      } finally {
        await ours.close();
      }
    });

    it(`metadata filters select what SqliteSaver ${answers.sqliteSaver} selects`, async () => {
      const ours = saver();
      const mem = new MemorySaver();
      try {
        for (const s of [ours, mem]) {
          for (const thread of ["t1", "t2"]) {
            let parent = cfg(thread);
            for (const [i, md] of cases.metadata.entries()) parent = await s.put(parent, checkpoint(`${thread}-${i}`), md as CheckpointMetadata, {});
          }
        }
        assert.equal(answers.filters.length, cases.filters.length * 2);
        for (const a of answers.filters) {
          const config = a.thread === null ? { configurable: {} } : cfg(a.thread);
          const got = await outcome(() => ids(ours.list(config, { filter: a.filter })));
          assert.deepEqual(got, "ok" in a ? { ok: a.ok } : { error: a.error }, JSON.stringify(a.filter) + " thread " + a.thread);
          // MemorySaver (===) agrees wherever the filter value is not an object
          if (Object.values(a.filter).every((v) => v === null || typeof v !== "object") && "ok" in a) {
            assert.deepEqual([...(await ids(mem.list(config, { filter: a.filter })))].sort(), [...a.ok].sort(), JSON.stringify(a.filter));
          }
        }
      } finally {
        await ours.close();
      }
    });

    it("values larger than one frame together go ahead one by one (the limit is per value)", async () => {
      const ours = saver({ args: ["--max-state-size", "1MiB"] });
      try {
        const vals = Object.fromEntries(["a", "b", "c"].map((ch) => [ch, randomBytes(350 << 10).toString("hex")]));
        const cp: Checkpoint = { ...emptyCheckpoint(), channel_values: { ...vals }, channel_versions: { a: 1, b: 1, c: 1 } };
        const c = await ours.put(cfg("big"), cp, {} as CheckpointMetadata, { a: 1, b: 1, c: 1 });
        await ours.putWrites(c, Object.entries(vals), "task");
        const t = await ours.getTuple(c);
        assert.deepEqual(t?.checkpoint.channel_values, vals);
        assert.deepEqual(t?.pendingWrites?.map((w) => w[2]), Object.values(vals));
        const huge: Checkpoint = { ...emptyCheckpoint(), channel_values: { h: randomBytes(1 << 20).toString("hex") }, channel_versions: { h: 2 } };
        await assert.rejects(ours.put(c, huge, {} as CheckpointMetadata, { h: 2 }), TooLargeError);
      } finally {
        await ours.close();
      }
    });

    it("a step writing two 40 MB channels is stored (as MemorySaver stores it)", async () => {
      const S = Annotation.Root({ a: Annotation<string>, b: Annotation<string>, n: Annotation<number> });
      const big = randomBytes(20 << 20).toString("hex"); // 40 MB of text
      const g = new StateGraph(S)
        .addNode("big", (s) => ({ a: big, b: big.split("").reverse().join(""), n: s.n + 1 }))
        .addEdge(START, "big")
        .addEdge("big", END);
      const ours = saver();
      try {
        const results = [];
        for (const s of [new MemorySaver(), ours]) {
          const graph = g.compile({ checkpointer: s });
          const config = { configurable: { thread_id: "big" } };
          const out = await graph.invoke({ a: "", b: "", n: 0 }, config);
          const state = (await graph.getState(config)).values;
          results.push([out.n, state.n, state.a === big, state.b.length === big.length]);
        }
        assert.deepEqual(results[1], results[0]);
        assert.deepEqual(results[0], [1, 1, true, true]);
      } finally {
        await ours.close();
      }
    });

    it("thread ids as SqliteSaver (and MemorySaver where it takes them); the limit is 2048 bytes", async () => {
      const ours = saver();
      const mem = new MemorySaver();
      try {
        assert.equal(answers.threadIds.length, cases.threadIds.length);
        for (const t of answers.threadIds) {
          const thread = t.prefix + t.repeat.repeat(t.times);
          const put = await outcome(async () => (await ours.put(cfg(thread), checkpoint("c1"), { source: "input" } as CheckpointMetadata, {})).configurable?.thread_id === thread);
          if ("ok" in t.put) assert.deepEqual(put, t.put, thread.slice(0, 10));
          else assert.ok("error" in put && /thread_id/.test(put.error) && /thread_id/.test(t.put.error), `${JSON.stringify(put)} vs ${t.put.error}`);
          assert.deepEqual(await outcome(async () => (await ours.getTuple(cfg(thread)))?.checkpoint.id ?? null), t.get);
          if ("ok" in t.list) assert.deepEqual(await outcome(() => ids(ours.list(cfg(thread)))), t.list);
          if (thread !== "") {
            // MemorySaver, installed here, takes every non-empty id too (it refuses "", as SqliteSaver does)
            await mem.put(cfg(thread), checkpoint("c1"), { source: "input" } as CheckpointMetadata);
            assert.deepEqual(await ids(ours.list(cfg(thread))), await ids(mem.list(cfg(thread))));
          }
        }
        assert.ok(answers.threadIds.some((t) => "ok" in t.put && Buffer.byteLength(t.prefix + t.repeat.repeat(t.times)) > 1000));
        // the documented limit: 2048 bytes of UTF-8 are taken, one more is refused naming threadId
        const longest = "é".repeat(1024);
        assert.equal((await ours.put(cfg(longest), checkpoint("c1"), {} as CheckpointMetadata, {})).configurable?.thread_id, longest);
        assert.equal((await ours.getTuple(cfg(longest)))?.checkpoint.id, "c1");
        await assert.rejects(ours.put(cfg(longest + "x"), checkpoint("c1"), {} as CheckpointMetadata, {}), /threadId: longer than 2048 bytes/);
      } finally {
        await ours.close();
      }
    });

    it("NaN and Infinity metadata read back as SqliteSaver and MemorySaver read them", async () => {
      const ours = saver();
      const mem = new MemorySaver();
      try {
        for (const s of [ours, mem]) await s.put(cfg("nan"), checkpoint("n1"), numbers(cases.nanMetadata) as CheckpointMetadata, {});
        const got = (await ours.getTuple(cfg("nan")))?.metadata;
        assert.deepEqual(got, answers.nanMetadata);
        assert.deepEqual(got, (await mem.getTuple(cfg("nan")))?.metadata);
        assert.deepEqual((await ours.list(cfg("nan")).next()).value?.metadata, answers.nanMetadata);
      } finally {
        await ours.close();
      }
    });

    it("getTuple with a checkpoint_id hands back the caller's config, as SqliteSaver and MemorySaver", async () => {
      const ours = saver();
      const mem = new MemorySaver();
      try {
        const got = [];
        for (const s of [ours, mem]) {
          let parent = cfg("t1");
          for (const i of [0, 1, 2]) parent = await s.put(parent, checkpoint(`t1-${i}`), {} as CheckpointMetadata, {});
          const caller = { configurable: { thread_id: "t1", checkpoint_id: "t1-1", user: "ann" } };
          const t = await s.getTuple(caller);
          const latest = (await s.getTuple({ configurable: { thread_id: "t1" } }))!.config;
          got.push([t?.checkpoint.id, t?.config === caller, Object.keys(latest.configurable!).sort(), latest.configurable?.["checkpoint_id"]]);
        }
        assert.deepEqual(got[0], got[1]);
        assert.deepEqual(got[0], ["t1-1", answers.getTupleConfig.sameObject, Object.keys(answers.getTupleConfig.latest.configurable!).sort(), "t1-2"]);
        assert.equal(answers.getTupleConfig.sameObject, true);
      } finally {
        await ours.close();
      }
    });

    it("retention keepLast: the newest checkpoints and what their replay needs, states as MemorySaver's", async () => {
      const S = Annotation.Root({
        messages: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
        turns: Annotation<number>,
      });
      const g = new StateGraph(S).addNode("bot", (s) => ({ turns: s.turns + 1 })).addEdge(START, "bot").addEdge("bot", END);
      const ours = saver({ retention: { keepLast: 20 } });
      const mem = new MemorySaver();
      try {
        const turns = 150;
        const graphs = [g.compile({ checkpointer: ours }), g.compile({ checkpointer: mem })] as const;
        const config = { configurable: { thread_id: "chat" } };
        for (let i = 0; i < turns; i++) {
          const msg = `${i} ${randomBytes(500).toString("hex")}`;
          for (const graph of graphs) await graph.invoke({ messages: [msg], turns: i }, config);
        }
        const hist = [];
        for await (const s of graphs[0].getStateHistory(config)) hist.push(s);
        const memHist = [];
        for await (const s of graphs[1].getStateHistory(config)) memHist.push(s);
        assert.equal(memHist.length, 3 * turns);
        assert.ok(hist.length >= 20 && hist.length <= 22, String(hist.length));
        for (let i = 0; i < hist.length; i++) {
          assert.deepEqual(hist[i]!.values, memHist[i]!.values);
          assert.deepEqual(hist[i]!.metadata?.step, memHist[i]!.metadata?.step);
        }
        assert.deepEqual((await ours.client().then((c) => c.call("lg/configure", { threadId: "chat" }))).result,
          { threadId: "chat", retention: { keepLast: 20, maxAgeSeconds: 0, keepFirst: false, idleTtlSeconds: 0 }, source: "thread" });
      } finally {
        await ours.close();
      }
    });

    it("an idle thread is gone after the next sweep; a busy one stays", async () => {
      const ours = saver({ args: ["--sweep-interval", "200ms"], retention: { idleTtlSeconds: 1 } });
      try {
        for (const thread of ["idle", "busy"]) await ours.put(cfg(thread), checkpoint(`${thread}-0`), {} as CheckpointMetadata, {});
        const deadline = Date.now() + 30_000;
        let puts = 1;
        while ((await ours.getTuple(cfg("idle"))) !== undefined) {
          assert.ok(Date.now() < deadline, "the idle thread was not deleted");
          await ours.put(cfg("busy"), checkpoint(`busy-${String(puts++).padStart(6, "0")}`), {} as CheckpointMetadata, {});
          await sleep(50);
        }
        assert.equal((await ids(ours.list(cfg("busy")))).length, puts);
      } finally {
        await ours.close();
      }
    });

    it("the retention option is checked", () => {
      for (const bad of [{ keepLsat: 1 }, { keepLast: -1 }, { keepLast: 1.5 }, { keepFirst: 1 }, { idleTtlSeconds: "1d" }, [1]]) {
        assert.throws(() => saver({ retention: bad }), TypeError, JSON.stringify(bad));
      }
    });
  });
}
