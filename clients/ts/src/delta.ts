/**
 * Wire deltas (docs/protocol.md, "Wire deltas"): a state that is an edit of the last state this
 * client saved of the same workflow and namespace is sent as its changed middle only, with
 * `stateDelta: {baseCheckpointId, keepPrefix, keepSuffix, sha256}`. Node built-ins only.
 */

import { createHash } from "node:crypto";

/** States up to this size are always sent whole. */
export const DELTA_MIN_BYTES = 4 << 10;
/** A delta is sent when its middle is less than this percentage of the state. */
export const DELTA_MAX_MIDDLE_PERCENT = 50;
/** What a client remembers: at most this many workflows (and namespaces), and bytes. */
export const DELTA_MEMORY_ENTRIES = 256;
export const DELTA_MEMORY_BYTES = 64 << 20;

const BLOCK = 64 << 10;

function eq(a: Uint8Array, a0: number, a1: number, b: Uint8Array, b0: number, b1: number): boolean {
  return Buffer.from(a.buffer, a.byteOffset + a0, a1 - a0).equals(Buffer.from(b.buffer, b.byteOffset + b0, b1 - b0));
}

/** Length of the longest common prefix of `a` and `b` (64 KiB blocks, then a bisection). */
export function commonPrefix(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i + BLOCK <= n && eq(a, i, i + BLOCK, b, i, i + BLOCK)) i += BLOCK;
  let lo = i;
  let hi = Math.min(i + BLOCK, n);
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (eq(a, lo, mid, b, lo, mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** Length of the longest common suffix of `a` and `b`. */
export function commonSuffix(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  const la = a.length;
  const lb = b.length;
  let i = 0;
  while (i + BLOCK <= n && eq(a, la - i - BLOCK, la - i, b, lb - i - BLOCK, lb - i)) i += BLOCK;
  let lo = i;
  let hi = Math.min(i + BLOCK, n);
  while (lo < hi) {
    const mid = (lo + hi + 1) >>> 1;
    if (eq(a, la - mid, la - lo, b, lb - mid, lb - lo)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/** The delta from `prev` to `next`: the longest common prefix, then the longest common suffix of the rest. */
export function computeDelta(prev: Uint8Array, next: Uint8Array): { keepPrefix: number; keepSuffix: number; middle: Uint8Array } {
  const keepPrefix = commonPrefix(prev, next);
  const keepSuffix = commonSuffix(prev.subarray(keepPrefix), next.subarray(keepPrefix));
  return { keepPrefix, keepSuffix, middle: next.subarray(keepPrefix, next.length - keepSuffix) };
}

/** Whether a state of `size` bytes is worth sending as a delta with a middle of `middle` bytes. */
export function deltaPays(size: number, middle: number): boolean {
  return size > DELTA_MIN_BYTES && middle * 100 < size * DELTA_MAX_MIDDLE_PERCENT;
}

/** `checkpoint/save`'s `stateDelta` on the wire. */
export interface StateDelta {
  baseCheckpointId: string;
  keepPrefix: number;
  keepSuffix: number;
  sha256: string;
}

/** The last state a client saved per (workflowId, namespace), least recently saved out first. */
export class DeltaMemory {
  private readonly m = new Map<string, { checkpointId: string; state: Uint8Array }>();
  private bytes = 0;

  constructor(
    readonly maxEntries = DELTA_MEMORY_ENTRIES,
    readonly maxBytes = DELTA_MEMORY_BYTES,
  ) {}

  private static key(workflowId: string, namespace: string): string {
    return JSON.stringify([workflowId, namespace]);
  }

  /** The delta of `state` against the last state saved of the workflow, when it pays; else null. */
  plan(workflowId: string, namespace: string, state: Uint8Array): { delta: StateDelta; middle: Uint8Array } | null {
    if (state.length <= DELTA_MIN_BYTES) return null;
    const last = this.m.get(DeltaMemory.key(workflowId, namespace));
    if (last === undefined) return null;
    const { keepPrefix, keepSuffix, middle } = computeDelta(last.state, state);
    if (!deltaPays(state.length, middle.length)) return null;
    const sha256 = createHash("sha256").update(state).digest("hex");
    return { delta: { baseCheckpointId: last.checkpointId, keepPrefix, keepSuffix, sha256 }, middle };
  }

  /** The last state remembered of the workflow and namespace, if any. */
  last(workflowId: string, namespace: string): { checkpointId: string; state: Uint8Array } | undefined {
    return this.m.get(DeltaMemory.key(workflowId, namespace));
  }

  /** Remembers `state` (which must not change afterwards) as the last one saved of the workflow. */
  remember(workflowId: string, namespace: string, checkpointId: string, state: Uint8Array): void {
    const k = DeltaMemory.key(workflowId, namespace);
    const old = this.m.get(k);
    if (old !== undefined) {
      this.m.delete(k);
      this.bytes -= old.state.length;
    }
    if (state.length <= DELTA_MIN_BYTES || state.length > this.maxBytes / 4) return;
    this.m.set(k, { checkpointId, state });
    this.bytes += state.length;
    for (const [key, v] of this.m) {
      if (this.m.size <= this.maxEntries && this.bytes <= this.maxBytes) break;
      this.m.delete(key);
      this.bytes -= v.state.length;
    }
  }
}

/** Whether a delta save failed because its base is gone (-32001) or damaged (-32002): send the state whole. */
export function baseUnusable(err: unknown, baseCheckpointId: string): boolean {
  const e = err as { code?: unknown; data?: unknown };
  if (e === null || typeof e !== "object" || (e.code !== -32001 && e.code !== -32002)) return false;
  const d = e.data as { checkpointId?: unknown } | null | undefined;
  return d !== null && typeof d === "object" && d.checkpointId === baseCheckpointId;
}

/** How far past the common prefix a value delta looks for a small replacement followed by a long common run. */
const DELTA_SKIP = 16;

/**
 * `lg/put`'s `blobs[i].delta` (docs/protocol.md, lg/put "Value deltas"): `copies` splice ranges of the
 * base (`[at, from, length]`: the base's bytes `[from, from+length)` at offset `at` of the segment).
 */
export interface ValueDelta {
  baseVersion: string | number;
  keepPrefix: number;
  keepSuffix: number;
  sha256: string;
  copies?: [number, number, number][];
}

/**
 * A channel value `next` as a delta against `base` when it pays, else null: one middle first;
 * failing that, a replacement of at most 16 bytes after the common prefix (the count in the
 * header of a list that grew), the long common run after it copied from the base, then the
 * middle and the common suffix of the rest.
 */
export function valueDelta(
  base: Uint8Array,
  next: Uint8Array,
): { keepPrefix: number; keepSuffix: number; segment: Uint8Array; copies: [number, number, number][] } | null {
  if (next.length <= DELTA_MIN_BYTES) return null;
  const { keepPrefix, keepSuffix, middle } = computeDelta(base, next);
  if (deltaPays(next.length, middle.length)) return { keepPrefix, keepSuffix, segment: middle, copies: [] };
  for (let j = 1; j <= DELTA_SKIP; j++) {
    const at = keepPrefix + j;
    if (at >= base.length || at >= next.length) break;
    const run = commonPrefix(base.subarray(at), next.subarray(at));
    if (run * 100 < next.length * DELTA_MAX_MIDDLE_PERCENT) continue;
    const end = at + run;
    const ks = commonSuffix(base.subarray(end), next.subarray(end));
    const head = next.subarray(keepPrefix, at);
    const tail = next.subarray(end, next.length - ks);
    if (!deltaPays(next.length, head.length + tail.length)) break;
    const segment = new Uint8Array(head.length + tail.length);
    segment.set(head, 0);
    segment.set(tail, head.length);
    return { keepPrefix, keepSuffix: ks, segment, copies: [[j, at, run]] };
  }
  return null;
}

/** Whether an `lg/put` failed because of one of its value deltas: send it again with every value whole. */
export function valueDeltaRefused(err: unknown): boolean {
  const e = err as { code?: unknown; data?: unknown };
  if (e === null || typeof e !== "object") return false;
  if (e.code === -32002) return true;
  if (e.code !== -32001 && e.code !== -32602) return false;
  const d = e.data as { field?: unknown } | null | undefined;
  return d !== null && typeof d === "object" && typeof d.field === "string" && d.field.includes(".delta");
}
