/**
 * Save/load round-trip latency through the TypeScript client, for 1 KB and 100 KB states.
 *
 *   npm run build && CKPTD_PATH=/path/to/ckptd node build/bench/roundtrip.js [--n 500] [--durability full|normal] [--db PATH]
 *
 * Each operation is awaited before the next (latency, not throughput); then a pipelined batch
 * shows throughput. Prints p50/p95/p99 in milliseconds.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { Client } from "ckptd";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "500" },
    durability: { type: "string", default: "full" },
    db: { type: "string" },
    warmup: { type: "string", default: "50" },
  },
});
const n = Number(values.n);
const warmup = Number(values.warmup);

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

function summary(label: string, ms: number[]): string {
  const s = [...ms].sort((a, b) => a - b);
  const f = (x: number) => x.toFixed(3).padStart(8);
  return `${label.padEnd(22)} n=${String(s.length).padEnd(5)} p50=${f(pct(s, 50))}  p95=${f(pct(s, 95))}  p99=${f(pct(s, 99))}  max=${f(s.at(-1)!)} ms`;
}

/** A JSON state of about `size` bytes (an agent-like message list). */
function jsonState(size: number): unknown {
  const messages: { role: string; content: string }[] = [];
  let total = 20;
  let i = 0;
  while (total < size) {
    const content = randomBytes(48).toString("base64");
    messages.push({ role: i++ % 2 === 0 ? "user" : "assistant", content });
    total += content.length + 32;
  }
  return { messages, step: i };
}

async function main(): Promise<void> {
  const dir = values.db === undefined ? mkdtempSync(join(tmpdir(), "ckptd-bench-")) : null;
  const db = values.db ?? join(dir!, "bench.db");
  const client = await Client.start({ db, args: ["--durability", values.durability!, "--keep-last", "0"] });
  console.log(`ckptd ${client.serverInfo?.serverVersion} (${client.binary}), durability=${values.durability}, db=${db}`);
  console.log(`node ${process.version}, ${n} sequential round trips per case after ${warmup} warm-up\n`);
  try {
    for (const [label, size] of [
      ["1 KB", 1024],
      ["100 KB", 100 * 1024],
    ] as const) {
      for (const kind of ["json", "bytes"] as const) {
        const state = kind === "json" ? jsonState(size) : new Uint8Array(randomBytes(size));
        const wf = `bench-${label.replace(" ", "")}-${kind}`;
        const saveMs: number[] = [];
        const loadMs: number[] = [];
        const ids: string[] = [];
        for (let i = 0; i < warmup + n; i++) {
          // Vary the state so every save stores new bytes (no deduplication).
          const s = kind === "json" ? { ...(state as object), i } : (((state as Uint8Array)[0] = i & 0xff), state);
          const t0 = performance.now();
          const r = await client.save({ workflowId: wf, step: i, state: s });
          const dt = performance.now() - t0;
          if (i >= warmup) saveMs.push(dt);
          ids.push(r.checkpointId);
        }
        for (let i = 0; i < warmup + n; i++) {
          const t0 = performance.now();
          await client.load({ checkpointId: ids[i % ids.length]! });
          const dt = performance.now() - t0;
          if (i >= warmup) loadMs.push(dt);
        }
        console.log(summary(`save ${label} ${kind}`, saveMs));
        console.log(summary(`load ${label} ${kind}`, loadMs));

        const batch = 200;
        const t0 = performance.now();
        await Promise.all(
          Array.from({ length: batch }, (_, i) =>
            client.save({ workflowId: `${wf}-pipelined`, step: i, state: kind === "json" ? { ...(state as object), p: i } : state }),
          ),
        );
        const secs = (performance.now() - t0) / 1000;
        console.log(`${"pipelined saves".padEnd(22)} ${batch} in ${(secs * 1000).toFixed(1)} ms = ${(batch / secs).toFixed(0)} saves/s\n`);
      }
    }
    const st = await client.stats();
    console.log(`server-side latency: save p50=${st.latency.save.p50Ms.toFixed(3)} p99=${st.latency.save.p99Ms.toFixed(3)} ms; load p50=${st.latency.load.p50Ms.toFixed(3)} p99=${st.latency.load.p99Ms.toFixed(3)} ms`);
  } finally {
    await client.close();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
