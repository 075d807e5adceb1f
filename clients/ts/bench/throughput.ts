/**
 * Graphs per second under concurrency: C concurrent `graph.invoke` of a 3-node LangGraph.js graph
 * on distinct threads, CkptdSaver (one daemon, group commit) against @langchain/langgraph-checkpoint-sqlite's
 * SqliteSaver (better-sqlite3, synchronous calls on the event loop), at the same durability.
 * The two alternate in rounds of --seconds/2 each, twice, so that machine noise hits both alike.
 * #18's target: CkptdSaver >= 2x the graphs/s.
 *
 *   npm run build && node build/bench/throughput.js [--concurrency 32] [--seconds 4] [--durability full|normal] [--json out.json]
 *
 * SqliteSaver and better-sqlite3 come from bench/node_modules (bench/package.json), installed by
 * `npm run bench:langgraph` or ./scripts/bench.sh --ts-install: never dependencies of the tests.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { CkptdSaver } from "ckptd/langgraph";

const { values: opts } = parseArgs({
  options: {
    concurrency: { type: "string", default: "32" },
    seconds: { type: "string", default: "4" },
    durability: { type: "string", default: "full" },
    json: { type: "string" },
  },
});
const C = Number(opts.concurrency);
const SECONDS = Number(opts.seconds);

function benchDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json")) || !existsSync(join(dir, "bench"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("clients/ts not found");
    dir = up;
  }
  return join(dir, "bench");
}

type SqliteSaverLike = BaseCheckpointSaver & { db: { pragma(s: string, o?: { simple: boolean }): unknown; close(): void }; setup(): void };

function loadSqliteSaver(): { fromConnString(path: string): SqliteSaverLike } {
  const dir = benchDir();
  if (!existsSync(join(dir, "node_modules", "@langchain", "langgraph-checkpoint-sqlite"))) {
    throw new Error(`SqliteSaver is not installed in ${dir}/node_modules (run npm run bench:langgraph once, or ./scripts/bench.sh --ts-install)`);
  }
  return createRequire(join(dir, "package.json"))("@langchain/langgraph-checkpoint-sqlite").SqliteSaver;
}

const WORDS = "the agent calls a tool and reads the result then plans the next step".split(" ");
const State = Annotation.Root({
  messages: Annotation<{ node: string; text: string }[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  step: Annotation<number>,
});

function graph(saver: BaseCheckpointSaver) {
  const node = (name: string) => (s: typeof State.State) => ({
    messages: [{ node: name, text: WORDS.slice(0, 6 + (s.step % 6)).join(" ") }],
    step: s.step + 1,
  });
  return new StateGraph(State)
    .addNode("plan", node("plan"))
    .addNode("act", node("act"))
    .addNode("reflect", node("reflect"))
    .addEdge(START, "plan")
    .addEdge("plan", "act")
    .addEdge("act", "reflect")
    .addEdge("reflect", END)
    .compile({ checkpointer: saver });
}

interface Tally {
  graphs: number;
  seconds: number;
  lat: number[];
}

async function rounds(saver: BaseCheckpointSaver, seconds: number, tag: string, t: Tally): Promise<void> {
  const g = graph(saver);
  const t0 = performance.now();
  let r = 0;
  while (performance.now() - t0 < seconds * 1000 || r === 0) {
    await Promise.all(
      Array.from({ length: C }, async (_, k) => {
        const s = performance.now();
        const out = await g.invoke({ messages: [{ node: "input", text: "go" }], step: 0 }, { configurable: { thread_id: `${tag}-${r}-${k}` } });
        if (out.step !== 3) throw new Error(`${tag}: step ${out.step}`);
        t.lat.push(performance.now() - s);
      }),
    );
    t.graphs += C;
    r++;
  }
  t.seconds += (performance.now() - t0) / 1000;
}

async function main(): Promise<void> {
  const SqliteSaver = loadSqliteSaver();
  const dir = mkdtempSync(join(tmpdir(), "ckptd-tp-bench-"));
  const ckptd = new CkptdSaver({ db: join(dir, "ckptd.db"), args: ["--durability", opts.durability!, "--log-level", "warn"] });
  await ckptd.setup();
  const sqlite = SqliteSaver.fromConnString(join(dir, "sqlite.db"));
  sqlite.setup();
  sqlite.db.pragma(`synchronous = ${opts.durability === "normal" ? "NORMAL" : "FULL"}`);
  const tally: Record<string, Tally> = { ckptd: { graphs: 0, seconds: 0, lat: [] }, SqliteSaver: { graphs: 0, seconds: 0, lat: [] } };
  try {
    for (let n = 0; n < 2; n++) {
      for (const who of n === 0 ? ["ckptd", "SqliteSaver"] : ["SqliteSaver", "ckptd"]) {
        await rounds(who === "ckptd" ? ckptd : sqlite, SECONDS / 2, `${who}${n}`, tally[who]!);
      }
    }
  } finally {
    await ckptd.close();
    sqlite.db.close();
    rmSync(dir, { recursive: true, force: true });
  }
  const per = (t: Tally) => t.graphs / t.seconds;
  const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.round(0.95 * (xs.length - 1)))]!;
  const res = {
    concurrency: C,
    durability: opts.durability,
    ckptd: { graphs: tally.ckptd!.graphs, seconds: tally.ckptd!.seconds, per_s: per(tally.ckptd!), p95_ms: p95(tally.ckptd!.lat) },
    SqliteSaver: {
      graphs: tally.SqliteSaver!.graphs,
      seconds: tally.SqliteSaver!.seconds,
      per_s: per(tally.SqliteSaver!),
      p95_ms: p95(tally.SqliteSaver!.lat),
    },
    ratio: per(tally.ckptd!) / per(tally.SqliteSaver!),
  };
  console.log(
    `${C} concurrent invoke (${opts.durability}): CkptdSaver ${res.ckptd.per_s.toFixed(0)} graphs/s | SqliteSaver ${res.SqliteSaver.per_s.toFixed(0)} graphs/s | ${res.ratio.toFixed(2)}x`,
  );
  if (opts.json !== undefined) writeFileSync(opts.json, JSON.stringify(res));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
