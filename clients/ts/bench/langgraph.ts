/**
 * CkptdSaver vs @langchain/langgraph-checkpoint-sqlite's SqliteSaver, side by side in one process
 * on the same LangGraph-shaped workload: one thread, N steps (default 1000); the state holds a
 * growing message list (~100 KB by the end) plus small channels, some changing every step, one
 * never after the first. Each step does what a LangGraph run does to its checkpointer: put the new
 * checkpoint (with `newVersions` naming the changed channels), putWrites of the step's task, then
 * getTuple (latest) and list(limit 10), timing every call. The two savers alternate which goes
 * first at every step, so machine noise hits both alike.
 *
 *   npm run bench:langgraph -- [--steps 1000] [--durability full|normal] [--keep] [--json raw.json]
 *
 * ckptd runs at --durability (default `full`: fsync per commit) and SqliteSaver at the same level
 * (synchronous=FULL, or NORMAL with --durability normal: WAL, no fsync per commit). SqliteSaver and better-sqlite3 (compiled from
 * source, a few minutes) are installed on first run into bench/node_modules from
 * bench/package.json: they are not dependencies of the package or of its tests.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import type { RunnableConfig } from "@langchain/core/runnables";
import { uuid6, type BaseCheckpointSaver, type Checkpoint, type CheckpointMetadata } from "@langchain/langgraph-checkpoint";
import { CkptdSaver } from "ckptd/langgraph";

const { values: opts } = parseArgs({
  options: {
    steps: { type: "string", default: "1000" },
    durability: { type: "string", default: "full" },
    keep: { type: "boolean", default: false },
    json: { type: "string" },
  },
});
const STEPS = Number(opts.steps);

// ---------------------------------------------------------------------------------------------
// SqliteSaver, installed on demand

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json")) || !existsSync(join(dir, "bench"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("clients/ts not found");
    dir = up;
  }
  return dir;
}

type SqliteSaverLike = BaseCheckpointSaver & { db: { pragma(s: string, o?: { simple: boolean }): unknown; close(): void }; setup(): void };
type SqliteSaverClass = { fromConnString(path: string): SqliteSaverLike };

function loadSqliteSaver(): SqliteSaverClass {
  const benchDir = join(packageRoot(), "bench");
  if (!existsSync(join(benchDir, "node_modules", "@langchain", "langgraph-checkpoint-sqlite"))) {
    console.error("installing the bench's dependencies (SqliteSaver, better-sqlite3 from source: a few minutes) into bench/node_modules ...");
    // --legacy-peer-deps: its peers (@langchain/langgraph-checkpoint, @langchain/core) resolve to the
    // package's own dev dependencies, one directory up, so both savers share one LangGraph.
    const r = spawnSync("npm", ["install", "--no-audit", "--no-fund", "--no-package-lock", "--legacy-peer-deps"], { cwd: benchDir, stdio: "inherit" });
    if (r.status !== 0) throw new Error(`npm install in ${benchDir} failed (${r.status ?? r.signal})`);
  }
  const req = createRequire(join(benchDir, "package.json"));
  return (req("@langchain/langgraph-checkpoint-sqlite") as { SqliteSaver: SqliteSaverClass }).SqliteSaver;
}

// ---------------------------------------------------------------------------------------------
// Workload

/** Deterministic pseudo-random numbers (mulberry32), so every run has the same workload. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const WORDS = (
  "the a to of and in is it you that for on with as this be are was at by not or from have an they which one " +
  "can we all your there has more if will when what so about up out do into time how some could them see other " +
  "than then now look only come its over think also back after use two work first well way even new want because " +
  "any these give day most us checkpoint resume agent tool call result error retry state graph node edge thread " +
  "message user assistant weather search file code test build deploy query answer plan step summary context"
).split(" ");

interface Message {
  id: string;
  role: "human" | "ai" | "tool";
  content: string;
}

class Workload {
  private readonly rand = rng(42);
  readonly messages: Message[] = [];

  /** The state after step i: one more message (~100 bytes of JSON) plus small channels. */
  step(i: number): { values: Record<string, unknown>; changed: string[]; write: Message } {
    const n = 8 + Math.floor(this.rand() * 9);
    const words = Array.from({ length: n }, () => WORDS[Math.floor(this.rand() * WORDS.length)]!);
    const role = (["human", "ai", "tool"] as const)[i % 3]!;
    const msg: Message = { id: `msg-${i.toString(36)}`, role, content: words.join(" ") };
    this.messages.push(msg);
    const values: Record<string, unknown> = {
      messages: [...this.messages],
      step: i,
      last_node: role === "tool" ? "tools" : "agent",
      usage: { input_tokens: 120 * (i + 1), output_tokens: 40 * (i + 1) },
      config: { model: "gpt-x", temperature: 0 },
    };
    const changed = i === 0 ? Object.keys(values) : ["messages", "step", "last_node", "usage"];
    return { values, changed, write: msg };
  }
}

// ---------------------------------------------------------------------------------------------
// Measurement

interface Runner {
  name: string;
  saver: BaseCheckpointSaver;
  versions: Record<string, number | string>;
  config: RunnableConfig;
  t: Record<Op, number[]>;
}
type Op = "put" | "putWrites" | "getTuple" | "list10";
const OPS: Op[] = ["put", "putWrites", "getTuple", "list10"];

async function timed<T>(out: number[], fn: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const r = await fn();
  out.push(performance.now() - t0);
  return r;
}

async function stepOn(r: Runner, i: number, values: Record<string, unknown>, changed: string[], write: Message, threadId: string): Promise<number> {
  const s = r.saver;
  const max = Object.values(r.versions).reduce<number | string | undefined>((m, v) => (m === undefined || v > m ? v : m), undefined);
  const next = s.getNextVersion(max as number | undefined);
  const newVersions: Record<string, number | string> = {};
  for (const ch of changed) newVersions[ch] = r.versions[ch] = next;
  const checkpoint: Checkpoint = {
    v: 4,
    id: uuid6(-1),
    ts: new Date().toISOString(),
    channel_values: values,
    channel_versions: { ...r.versions },
    versions_seen: { agent: { messages: r.versions["messages"]! }, tools: { last_node: r.versions["last_node"]! } },
  };
  const metadata: CheckpointMetadata = { source: i === 0 ? "input" : "loop", step: i - 1, parents: {} };
  const cfg = await timed(r.t.put, () => s.put(r.config, checkpoint, metadata, newVersions));
  r.config = cfg;
  await timed(r.t.putWrites, () => s.putWrites(cfg, [["messages", [write]], ["last_node", values["last_node"]]], `task-${i}`));
  const latest = await timed(r.t.getTuple, () => s.getTuple({ configurable: { thread_id: threadId, checkpoint_ns: "" } }));
  if (latest?.checkpoint.id !== checkpoint.id) throw new Error(`${r.name}: getTuple returned ${latest?.checkpoint.id}, want ${checkpoint.id}`);
  const msgs = latest.checkpoint.channel_values["messages"] as Message[];
  if (msgs.length !== i + 1 || msgs[i]!.id !== write.id) throw new Error(`${r.name}: step ${i}: wrong messages`);
  let n = 0;
  await timed(r.t.list10, async () => {
    for await (const _ of s.list({ configurable: { thread_id: threadId, checkpoint_ns: "" } }, { limit: 10 })) n++;
  });
  if (n !== Math.min(10, i + 1)) throw new Error(`${r.name}: list returned ${n} tuples`);
  return JSON.stringify(values).length;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function fileSize(path: string): number {
  let total = 0;
  for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) total += statSync(f).size;
  return total;
}

async function main(): Promise<void> {
  const SqliteSaver = loadSqliteSaver();
  const dir = mkdtempSync(join(tmpdir(), "ckptd-lg-bench-"));
  const ckptdDb = join(dir, "ckptd.db");
  const sqliteDb = join(dir, "sqlite-saver.db");
  const ckptd = new CkptdSaver({ db: ckptdDb, args: ["--durability", opts.durability!] });
  await ckptd.setup();
  const sqlite = SqliteSaver.fromConnString(sqliteDb);
  sqlite.setup(); // WAL
  const sync = opts.durability === "normal" ? "NORMAL" : "FULL"; // the same durability as ckptd's
  sqlite.db.pragma(`synchronous = ${sync}`);
  const client = await ckptd.client();
  console.log(
    `ckptd ${client.serverInfo?.serverVersion} (durability ${client.serverInfo?.capabilities.durability}) vs SqliteSaver (better-sqlite3, WAL, synchronous=${sqlite.db.pragma("synchronous", { simple: true })} = ${sync})`,
  );
  console.log(`node ${process.version}; ${STEPS} steps of one thread; per step: put, putWrites, getTuple (latest), list(limit 10)\n`);

  const threadId = `bench-${uuid6(-1)}`;
  const mk = (name: string, saver: BaseCheckpointSaver): Runner => ({
    name,
    saver,
    versions: {},
    config: { configurable: { thread_id: threadId, checkpoint_ns: "" } },
    t: { put: [], putWrites: [], getTuple: [], list10: [] },
  });
  const runners = [mk("ckptd", ckptd), mk("SqliteSaver", sqlite)];
  const work = new Workload();
  let stateBytes = 0;
  let server: Record<string, { p50Ms: number; p95Ms: number; p99Ms: number }> = {};
  try {
    for (let i = 0; i < STEPS; i++) {
      const { values, changed, write } = work.step(i);
      const order = i % 2 === 0 ? runners : [...runners].reverse();
      for (const r of order) stateBytes = await stepOn(r, i, values, changed, write, threadId);
      if ((i + 1) % 100 === 0) process.stderr.write(`  step ${i + 1}/${STEPS}\r`);
    }
    server = (await client.stats()).latency; // the daemon's side of each call (last 1024 calls)
  } finally {
    await ckptd.close();
    sqlite.db.close();
  }
  process.stderr.write("\n");

  const sizes = { ckptd: fileSize(ckptdDb), SqliteSaver: fileSize(sqliteDb) };
  // #18's targets, p95 ratio at the same durability
  const targets: Record<Op, number | null> = { put: 1.3, putWrites: null, getTuple: 1.2, list10: 1.0 };
  const f = (x: number) => x.toFixed(2);
  console.log(`final state: ${(stateBytes / 1024).toFixed(0)} KB of JSON (${work.messages.length} messages)\n`);
  console.log("| op | ckptd p50 / p95 / p99 (ms) | SqliteSaver p50 / p95 / p99 (ms) | p50 ratio | p95 ratio | target (p95) |");
  console.log("|---|---|---|---|---|---|");
  let ok = true;
  for (const op of OPS) {
    const [a, b] = runners.map((r) => [...r.t[op]].sort((x, y) => x - y)) as [number[], number[]];
    const ratio50 = pct(a, 50) / pct(b, 50);
    const ratio95 = pct(a, 95) / pct(b, 95);
    const target = targets[op];
    const verdict = target === null ? "(informative)" : `≤ ${target.toFixed(1)}× ${ratio95 <= target ? "✓" : "✗"}`;
    if (target !== null && ratio95 > target) ok = false;
    console.log(
      `| ${op === "list10" ? "list(limit 10)" : op} | ${f(pct(a, 50))} / ${f(pct(a, 95))} / ${f(pct(a, 99))} | ${f(pct(b, 50))} / ${f(pct(b, 95))} / ${f(pct(b, 99))} | ${f(ratio50)}× | ${f(ratio95)}× | ${verdict} |`,
    );
  }
  const mb = (n: number) => `${(n / 1024 / 1024).toFixed(2)} MB`;
  console.log(`| DB size at the end | ${mb(sizes.ckptd)} | ${mb(sizes.SqliteSaver)} | ${f(sizes.ckptd / sizes.SqliteSaver)}× | | |`);
  const methods: Record<Op, string> = { put: "lg/put", putWrites: "lg/putWrites", getTuple: "lg/get", list10: "lg/list" };
  console.log("\nckptd's share: time inside the daemon (stats), the rest is the client, serialisation and the pipe");
  console.log("| op | daemon p50 / p95 / p99 (ms) |");
  console.log("|---|---|");
  for (const op of OPS) {
    const l = server[methods[op]];
    if (l !== undefined) console.log(`| ${methods[op]} | ${f(l.p50Ms)} / ${f(l.p95Ms)} / ${f(l.p99Ms)} |`);
  }
  console.log(ok ? "\nall targets met" : "\nsome targets missed");
  if (opts.json !== undefined)
    writeFileSync(
      opts.json,
      JSON.stringify({ durability: opts.durability, steps: STEPS, sizes, samples_ms: Object.fromEntries(runners.map((r) => [r.name, r.t])) }),
    );
  if (opts.keep) console.log(`databases kept in ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
