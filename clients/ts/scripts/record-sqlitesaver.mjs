#!/usr/bin/env node
// Records what LangGraph.js's SqliteSaver answers for the cases of
// test/langgraph/sqlitesaver-cases.json into test/langgraph/sqlitesaver-answers.json, which the
// tests (test/langgraph.fidelity.e2e.test.ts) hold CkptdSaver to. Run once per SqliteSaver
// version; the tests themselves never load better-sqlite3 (a native module).
//
//   mkdir /tmp/ref && cd /tmp/ref && npm init -y && \
//     npm install @langchain/langgraph-checkpoint-sqlite@1.0.4 @langchain/core@1.4.0 @langchain/langgraph-checkpoint@1.2.2
//   node scripts/record-sqlitesaver.mjs /tmp/ref
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const casesPath = join(here, "..", "test", "langgraph", "sqlitesaver-cases.json");
const answersPath = join(here, "..", "test", "langgraph", "sqlitesaver-answers.json");
const from = process.argv[2];
if (!from) {
  console.error("usage: node scripts/record-sqlitesaver.mjs DIR   (DIR: where @langchain/langgraph-checkpoint-sqlite is installed)");
  process.exit(2);
}
const require = createRequire(join(from, "noop.js"));
const { SqliteSaver } = require("@langchain/langgraph-checkpoint-sqlite");
const { emptyCheckpoint } = require("@langchain/langgraph-checkpoint");
const version = require("@langchain/langgraph-checkpoint-sqlite/package.json").version;

const cases = JSON.parse(readFileSync(casesPath, "utf8"));
/** "$NaN", "$Infinity", "$-Infinity" stand for those numbers. */
const numbers = (v) => {
  if (v === "$NaN") return NaN;
  if (v === "$Infinity") return Infinity;
  if (v === "$-Infinity") return -Infinity;
  if (Array.isArray(v)) return v.map(numbers);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, numbers(x)]));
  return v;
};
const threadOf = (t) => t.prefix + t.repeat.repeat(t.times);
const cfg = (thread, id) => ({ configurable: { thread_id: thread, checkpoint_ns: "", ...(id ? { checkpoint_id: id } : {}) } });
const checkpoint = (id) => ({ ...emptyCheckpoint(), id });
const ids = async (it) => {
  const out = [];
  for await (const t of it) out.push(t.checkpoint.id);
  return out;
};
const outcome = async (f) => {
  try {
    return { ok: await f() };
  } catch (e) {
    return { error: String(e?.message ?? e) };
  }
};

const saver = SqliteSaver.fromConnString(":memory:");
const answers = { sqliteSaver: version, recordedWith: `node ${process.version}`, filters: [], threadIds: [], nanMetadata: null, getTupleConfig: null };

for (const thread of ["t1", "t2"]) {
  let parent = cfg(thread);
  for (const [i, md] of cases.metadata.entries()) {
    parent = await saver.put(parent, checkpoint(`${thread}-${i}`), md, {});
  }
}
for (const filter of cases.filters) {
  for (const scope of [null, "t1"]) {
    const r = await outcome(() => ids(saver.list(scope ? cfg(scope) : {}, { filter })));
    answers.filters.push({ filter, thread: scope, ...r });
  }
}
for (const t of cases.threadIds) {
  const thread = threadOf(t);
  const put = await outcome(async () => (await saver.put(cfg(thread), checkpoint("c1"), { source: "input" }, {})).configurable.thread_id === thread);
  const get = await outcome(async () => (await saver.getTuple(cfg(thread)))?.checkpoint.id ?? null);
  const list = await outcome(() => ids(saver.list(cfg(thread))));
  answers.threadIds.push({ ...t, put, get, list });
}
{
  await saver.put(cfg("nan"), checkpoint("n1"), numbers(cases.nanMetadata), {});
  answers.nanMetadata = (await saver.getTuple(cfg("nan"))).metadata;
}
{
  const caller = { configurable: { thread_id: "t1", checkpoint_id: "t1-2", user: "ann" } };
  const t = await saver.getTuple(caller);
  const latest = await saver.getTuple({ configurable: { thread_id: "t1" } });
  answers.getTupleConfig = { sameObject: t.config === caller, equal: JSON.stringify(t.config) === JSON.stringify(caller), latest: latest.config };
}
writeFileSync(answersPath, JSON.stringify(answers, null, 2) + "\n");
console.log(`recorded ${answers.filters.length} filter answers of SqliteSaver ${version} into ${answersPath}`);
