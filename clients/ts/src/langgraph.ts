/**
 * `ckptd/langgraph`: a LangGraph.js checkpointer backed by ckptd.
 *
 * ```ts
 * import { CkptdSaver } from "ckptd/langgraph";
 * const checkpointer = new CkptdSaver({ db: "./agent.db" }); // spawns `ckptd --db ./agent.db` on first use
 * const graph = workflow.compile({ checkpointer });
 * await graph.invoke(input, { configurable: { thread_id: "t-1" } });
 * await checkpointer.close();
 * ```
 *
 * Speaks the "LangGraph channel storage" methods of the protocol (`lg/*`, `thread/*`, see
 * docs/protocol.md): channel values are stored once per (thread, namespace, channel, version), a
 * `put` sends only the channels named in `newVersions`, and `getTuple` gets a checkpoint with
 * every channel value it refers to in one round trip; each checkpoint reads the values its own put
 * stored, also when a replayed branch makes a version another branch used. Every byte string
 * (checkpoint, channel values, write values) is serialized with the saver's `serde` and travels as
 * a segment of the frame attachment, never as base64 or inline JSON; values that do not fit one
 * frame together go ahead one by one (`lg/putValue`: the size limit is per value).
 *
 * It selects what LangGraph.js's `SqliteSaver` selects: `list({filter})` compares metadata as
 * JSON texts (`true` is not `1`, a missing key matches nothing), thread ids may be any string up to
 * 2048 bytes, and `getTuple` with a `checkpoint_id` hands back the caller's config. `retention`
 * bounds long threads (opt-in; see {@link CkptdSaverOptions}).
 *
 * Needs the peer dependency `@langchain/langgraph-checkpoint` (the core `ckptd` client has no
 * dependencies).
 */
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  JsonPlusSerializer,
  TASKS,
  WRITES_IDX_MAP,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type DeltaChannelHistory,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";

import { createHash } from "node:crypto";

import { Client, type ClientOptions } from "./client.js";
import { DeltaMemory, valueDelta, valueDeltaRefused } from "./delta.js";
import "./dispose.js";

/**
 * Opt-in retention of the threads a saver writes (LangGraph keeps every checkpoint by default);
 * every field optional, 0 = off. After each put the daemon keeps the `keepLast` newest checkpoints
 * of the put's thread and namespace (the first one too with `keepFirst`, none older than
 * `maxAgeSeconds`), plus every checkpoint a kept one's delta-channel replay needs and the put's
 * parent; a thread no put has touched for `idleTtlSeconds` is deleted by the daemon's next sweep.
 * Sent with each put, it becomes the thread's own retention (docs/protocol.md, `lg/configure`).
 */
export interface CkptdRetention {
  keepLast?: number;
  keepFirst?: boolean;
  maxAgeSeconds?: number;
  idleTtlSeconds?: number;
}

/** Options of {@link CkptdSaver}: either a database (a daemon is spawned) or an existing client. */
export type CkptdSaverOptions =
  | (Omit<ClientOptions, "db"> & {
      /** The database path (`--db`). */
      db: string;
      client?: undefined;
      /** Serializer (default: LangGraph's `JsonPlusSerializer`). */
      serde?: SerializerProtocol;
      retention?: CkptdRetention;
    })
  | {
      /** A started client; the saver does not close it. */
      client: Client;
      db?: undefined;
      serde?: SerializerProtocol;
      retention?: CkptdRetention;
      /** Send channel values as wire deltas when that pays (default true; see `deltas` of the other form). */
      deltas?: boolean;
    };

const RETENTION_KEYS = new Set(["keepLast", "keepFirst", "maxAgeSeconds", "idleTtlSeconds"]);

/** Validates a `retention` option (TypeError naming what is wrong) and copies it. */
function checkRetention(r: unknown): CkptdRetention | undefined {
  if (r === undefined || r === null) return undefined;
  if (typeof r !== "object" || Array.isArray(r)) {
    throw new TypeError("CkptdSaver: retention must be an object such as {keepLast: 20, idleTtlSeconds: 2592000}");
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    if (v === undefined) continue;
    if (!RETENTION_KEYS.has(k)) {
      throw new TypeError(`CkptdSaver: retention: unknown key "${k}" (known: ${[...RETENTION_KEYS].join(", ")})`);
    }
    if (k === "keepFirst") {
      if (typeof v !== "boolean") throw new TypeError("CkptdSaver: retention.keepFirst must be true or false");
    } else if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
      throw new TypeError(`CkptdSaver: retention.${k} must be a whole number >= 0 (0 = off), not ${String(v)}`);
    }
    out[k] = v;
  }
  return out as CkptdRetention;
}

/** `{offset, length}` of a byte string in a frame attachment (protocol: "segments"). */
interface Segment {
  offset: number;
  length: number;
}
interface TypedSegment extends Segment {
  type: string;
}

/** The wire form of a checkpoint tuple (`lg/get`, `lg/list`). */
interface WireTuple {
  threadId: string;
  namespace: string;
  checkpointId: string;
  parentId: string | null;
  createdAt?: string;
  checkpoint: TypedSegment;
  channelVersions: ChannelVersions;
  metadata?: Record<string, unknown> | null;
  blobs?: (TypedSegment & { channel: string; version: string | number })[];
  writes?: (TypedSegment & { taskId: string; taskPath?: string; idx: number; channel: string })[];
}

interface WireWrite extends TypedSegment {
  taskId: string;
  taskPath?: string;
  idx: number;
  channel: string;
}

const EMPTY = new Uint8Array(0);
/** `lg/list`'s largest `limit`; larger limits are applied client-side. */
const MAX_LIST_LIMIT = 100_000;
/** A request's attachment budget when the daemon does not say (its default --max-state-size). */
const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;
/** Metadata's encoding (it must be JSON for ckptd to filter on it), whatever the saver's serde. */
const metadataSerde = new JsonPlusSerializer();
const utf8Decoder = new TextDecoder("utf-8");

/** Packs byte strings into one attachment, handing out their segments. */
class AttachmentBuilder {
  private readonly parts: Uint8Array[] = [];
  private size = 0;

  add(bytes: Uint8Array): Segment {
    const seg = { offset: this.size, length: bytes.byteLength };
    if (bytes.byteLength > 0) {
      this.parts.push(bytes);
      this.size += bytes.byteLength;
    }
    return seg;
  }

  build(): Uint8Array | null {
    if (this.size === 0) return null;
    if (this.parts.length === 1) return this.parts[0]!;
    return Buffer.concat(this.parts, this.size);
  }
}

function segmentOf(attachment: Uint8Array | null, seg: Segment, what: string): Uint8Array {
  if (seg.length === 0) return EMPTY;
  if (attachment === null || seg.offset < 0 || seg.offset + seg.length > attachment.byteLength) {
    throw new Error(`ckptd: ${what}: segment [${seg.offset}, +${seg.length}) outside the response attachment (${attachment?.byteLength ?? 0} bytes)`);
  }
  return attachment.subarray(seg.offset, seg.offset + seg.length);
}

// ---------------------------------------------------------------------------------------------
// Serialization fast paths. With LangGraph's stock JsonPlusSerializer (and only then), plain JSON
// data skips its per-value replacer / async reviver: the bytes and values are exactly what
// `serde.dumpsTyped` / `serde.loadsTyped` would produce. Anything else goes through `serde`.

const MAX_PLAIN_DEPTH = 512;

/**
 * True when JsonPlusSerializer would serialize `v` exactly like `JSON.stringify`: only null,
 * booleans, numbers, strings, dense arrays and plain objects, no `undefined` (JsonPlus keeps it),
 * no functions, class instances (Date, Map, Set, Uint8Array, messages, ...), BigInts or cycles.
 */
function isPlainJson(v: unknown, depth = 0): boolean {
  switch (typeof v) {
    case "string":
    case "number":
    case "boolean":
      return true;
    case "object": {
      if (v === null) return true;
      if (depth > MAX_PLAIN_DEPTH) return false;
      if (Array.isArray(v)) {
        if (Object.getPrototypeOf(v) !== Array.prototype) return false;
        for (let i = 0; i < v.length; i++) {
          if (!(i in v) || !isPlainJson(v[i], depth + 1)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const k in v) {
        if (!Object.prototype.hasOwnProperty.call(v, k)) return false; // inherited enumerable keys (null-proto objects only)
        if (!isPlainJson((v as Record<string, unknown>)[k], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false; // undefined, function, symbol, bigint
  }
}

/**
 * True when JSON text, once parsed, contains nothing JsonPlusSerializer's reviver would change: it
 * only rewrites objects with an `lc` key, and `__proto__` keys behave differently when copied.
 */
function jsonTextIsInert(text: string): boolean {
  return !text.includes('"lc"') && !text.includes("__proto__");
}

/** The parsed-JSON equivalent of {@link jsonTextIsInert}. */
function jsonValueIsInert(v: unknown, depth = 0): boolean {
  if (v === null || typeof v !== "object") return true;
  if (depth > MAX_PLAIN_DEPTH) return false;
  if (Array.isArray(v)) return v.every((x) => jsonValueIsInert(x, depth + 1));
  for (const k of Object.keys(v)) {
    if (k === "lc" || k === "__proto__") return false;
    if (!jsonValueIsInert((v as Record<string, unknown>)[k], depth + 1)) return false;
  }
  return true;
}

/** ckptd's LangGraph `getNextVersion` (see {@link CkptdSaver.getNextVersion}). */
function nextVersion(current: string | number | undefined): string | number {
  if (typeof current === "string") {
    // The Python saver's format (ckptd.langgraph): "<32-digit counter>.<16 random digits>".
    const n = Number.parseInt(current.split(".")[0] ?? "", 10);
    const next = (Number.isFinite(n) ? n : 0) + 1;
    return `${String(next).padStart(32, "0")}.${String(Math.floor(Math.random() * 1e16)).padStart(16, "0")}`;
  }
  const base = typeof current === "number" && Number.isFinite(current) ? Math.floor(current) : 0;
  // A random fraction keeps versions mostly unique across forks of a thread (so values are stored
  // once; a fork that makes a version again with other bytes still reads its own), while staying
  // a number that is greater than `current`.
  let r = Math.random();
  while (r === 0) r = Math.random();
  return base + 1 + r;
}

function requireConfigurable(config: RunnableConfig, op: string): Record<string, unknown> {
  const c = config?.configurable;
  if (c === undefined || c === null || typeof c !== "object") {
    throw new Error(`CkptdSaver.${op}: config.configurable is missing`);
  }
  return c as Record<string, unknown>;
}

function requireThreadId(c: Record<string, unknown>, op: string): string {
  const t = c["thread_id"];
  if (t === undefined || t === null || t === "") {
    throw new Error(
      `CkptdSaver.${op}: config.configurable.thread_id is missing. A checkpointer needs a thread id, e.g. ` +
        `graph.invoke(input, { configurable: { thread_id: "my-thread" } })`,
    );
  }
  return String(t);
}

function namespaceOf(c: Record<string, unknown> | undefined): string {
  const ns = c?.["checkpoint_ns"];
  return ns === undefined || ns === null ? "" : String(ns);
}

function makeConfig(threadId: string, namespace: string, checkpointId: string): RunnableConfig {
  return { configurable: { thread_id: threadId, checkpoint_ns: namespace, checkpoint_id: checkpointId } };
}

/**
 * A LangGraph.js checkpointer (`BaseCheckpointSaver`) storing checkpoints in ckptd.
 *
 * - `new CkptdSaver({ db, binary?, args?, ... })` spawns its own daemon on first use (options as
 *   `Client.start`'s); `new CkptdSaver({ client })` uses an existing {@link Client}.
 * - `await saver.close()` (or `await using`) shuts down a daemon the saver started.
 * - Durability is ckptd's: `put` resolves after the commit (power-loss safe at the default
 *   `--durability full`). LangGraph threads are not subject to the checkpoints' retention
 *   (`--keep-last`); their own is opt-in: the `retention` option, `lg/configure`, or the daemon's
 *   `--lg-keep-last` / `--lg-idle-ttl`.
 */
export class CkptdSaver extends BaseCheckpointSaver {
  private clientPromise: Promise<Client> | null;
  private readonly ownsClient: boolean;
  private readonly startOptions: ClientOptions | null;
  private readonly retention: CkptdRetention | undefined;
  /** The last value put of each (thread, namespace, channel): the base of its next delta; null: off. */
  private readonly values: DeltaMemory | null;
  private closed = false;

  constructor(options: CkptdSaverOptions) {
    super(options?.serde);
    if (options === undefined || options === null || typeof options !== "object") {
      throw new TypeError("CkptdSaver: options {db} or {client} are required");
    }
    this.retention = checkRetention(options.retention);
    this.values = options.deltas === false ? null : new DeltaMemory();
    if (options.client !== undefined) {
      if (!(options.client instanceof Client)) throw new TypeError("CkptdSaver: options.client must be a ckptd Client");
      this.clientPromise = Promise.resolve(options.client);
      this.ownsClient = false;
      this.startOptions = null;
    } else {
      if (typeof options.db !== "string" || options.db === "") throw new TypeError("CkptdSaver: options.db (a database path) or options.client is required");
      const { serde: _serde, client: _client, retention: _retention, ...clientOptions } = options;
      this.startOptions = { clientName: "ckptd-ts/langgraph", ...clientOptions };
      this.clientPromise = null;
      this.ownsClient = true;
    }
  }

  /** Starts the daemon now instead of on first use (and reports a missing binary early). */
  async setup(): Promise<void> {
    await this.client();
  }

  /** The underlying client (started on first use). */
  async client(): Promise<Client> {
    if (this.closed) throw new Error("CkptdSaver is closed");
    if (this.clientPromise === null) {
      const p = Client.start(this.startOptions!);
      this.clientPromise = p;
      p.catch(() => {
        if (this.clientPromise === p) this.clientPromise = null; // allow a retry
      });
    }
    return this.clientPromise;
  }

  /** Closes the daemon if the saver started it (every acknowledged put is on disk). Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const p = this.clientPromise;
    this.clientPromise = null;
    if (p !== null && this.ownsClient) {
      const c = await p.catch(() => null);
      await c?.close();
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private async rpc(method: string, params: unknown, attachment?: Uint8Array | null): Promise<{ result: unknown; attachment: Uint8Array | null }> {
    const c = await this.client();
    return c.call(method, params, attachment ? { attachment } : {});
  }

  /**
   * Sends a request whose byte strings are `segments` (each a params object to complete, and its
   * bytes): in one attachment when they fit one frame (the daemon's `maxStateBytes`), else the
   * largest go ahead one by one with `lg/putValue` and the request names them by `valueId`.
   */
  private async send(method: string, params: Record<string, unknown>, segments: [Record<string, unknown>, Uint8Array][], threadId: string): Promise<void> {
    const c = await this.client();
    const caps = c.serverInfo?.capabilities;
    const budget = typeof caps?.maxStateBytes === "number" && caps.maxStateBytes > 0 ? caps.maxStateBytes : DEFAULT_MAX_BYTES;
    let total = segments.reduce((n, [, b]) => n + b.byteLength, 0);
    const staged = new Set<number>();
    if (total > budget && caps?.langgraph?.putValue) {
      const bySize = segments.map((_, i) => i).sort((a, b) => segments[b]![1].byteLength - segments[a]![1].byteLength);
      for (const i of bySize) {
        if (total <= budget) break;
        const [seg, bytes] = segments[i]!;
        if (bytes.byteLength === 0) break;
        if (seg["delta"] !== undefined) continue; // a delta's middle travels as a segment
        const { result } = await c.call("lg/putValue", { threadId, type: seg["type"], offset: 0, length: bytes.byteLength }, { attachment: bytes });
        delete seg["type"];
        seg["valueId"] = (result as { valueId: number }).valueId;
        staged.add(i);
        total -= bytes.byteLength;
      }
    }
    const att = new AttachmentBuilder();
    segments.forEach(([seg, bytes], i) => {
      if (!staged.has(i)) Object.assign(seg, att.add(bytes));
    });
    await this.rpc(method, params, att.build());
  }

  // -------------------------------------------------------------------------------------------
  // Serialization

  private get stockSerde(): boolean {
    return this.serde instanceof JsonPlusSerializer && Object.getPrototypeOf(this.serde) === JsonPlusSerializer.prototype;
  }

  private async dumps(value: unknown): Promise<[string, Uint8Array]> {
    if (this.stockSerde && isPlainJson(value)) return ["json", Buffer.from(JSON.stringify(value), "utf8")];
    const [type, bytes] = await this.serde.dumpsTyped(value);
    // Tolerate serializers that return text.
    return [type, typeof bytes === "string" ? Buffer.from(bytes, "utf8") : bytes];
  }

  private async loads(type: string, bytes: Uint8Array): Promise<unknown> {
    if (type === "json" && this.stockSerde) {
      const text = utf8Decoder.decode(bytes);
      if (jsonTextIsInert(text)) return JSON.parse(text);
      return this.serde.loadsTyped("json", text);
    }
    // A private copy: serializers may return the bytes themselves (`bytes` values), which must be
    // plain Uint8Arrays that do not pin the whole response attachment.
    return this.serde.loadsTyped(type, new Uint8Array(bytes));
  }

  /**
   * Metadata travels as a JSON object (ckptd filters `list` on it), encoded like LangGraph's SQL
   * savers do: with JsonPlusSerializer's JSON encoding (whatever `serde` is), revived on the way back.
   */
  private async metadataToWire(metadata: CheckpointMetadata | Record<string, unknown> | undefined): Promise<Record<string, unknown>> {
    if (metadata === undefined || metadata === null) return {};
    if (isPlainJson(metadata)) return metadata as Record<string, unknown>;
    const [, bytes] = await metadataSerde.dumpsTyped(metadata);
    return JSON.parse(utf8Decoder.decode(bytes)) as Record<string, unknown>;
  }

  private async metadataFromWire(metadata: Record<string, unknown> | null | undefined): Promise<CheckpointMetadata> {
    const m = metadata ?? {};
    if (jsonValueIsInert(m)) return m as CheckpointMetadata;
    return (await metadataSerde.loadsTyped("json", JSON.stringify(m))) as CheckpointMetadata;
  }

  // -------------------------------------------------------------------------------------------
  // Reading

  private async decodeWrites(writes: WireWrite[] | undefined, attachment: Uint8Array | null): Promise<CheckpointPendingWrite[]> {
    if (writes === undefined || writes.length === 0) return [];
    return Promise.all(
      writes.map(async (w, i) => [w.taskId, w.channel, await this.loads(w.type, segmentOf(attachment, w, `writes[${i}]`))] as CheckpointPendingWrite),
    );
  }

  private async decodeTuple(t: WireTuple, attachment: Uint8Array | null): Promise<CheckpointTuple> {
    const stored = (await this.loads(t.checkpoint.type, segmentOf(attachment, t.checkpoint, "checkpoint"))) as Partial<Checkpoint>;
    const channelValues: Record<string, unknown> = {};
    const blobs = t.blobs ?? [];
    const values = await Promise.all(blobs.map((b, i) => this.loads(b.type, segmentOf(attachment, b, `blobs[${i}]`))));
    for (let i = 0; i < blobs.length; i++) channelValues[blobs[i]!.channel] = values[i];
    const checkpoint = {
      v: stored.v,
      id: stored.id ?? t.checkpointId,
      ts: stored.ts,
      channel_values: channelValues,
      channel_versions: stored.channel_versions ?? t.channelVersions ?? {},
      versions_seen: stored.versions_seen ?? {},
    } as Checkpoint;
    // Keep any extra fields a newer LangGraph stores in checkpoints.
    for (const [k, v] of Object.entries(stored)) if (!(k in checkpoint)) (checkpoint as unknown as Record<string, unknown>)[k] = v;

    const [metadata, pendingWrites] = await Promise.all([this.metadataFromWire(t.metadata), this.decodeWrites(t.writes, attachment)]);
    const tuple: CheckpointTuple = {
      config: makeConfig(t.threadId, t.namespace, t.checkpointId),
      checkpoint,
      metadata,
      pendingWrites,
    };
    if (t.parentId !== null && t.parentId !== undefined) {
      tuple.parentConfig = makeConfig(t.threadId, t.namespace, t.parentId);
      if (checkpoint.v < 4) await this.migratePendingSends(checkpoint, t.threadId, t.namespace, t.parentId);
    }
    return tuple;
  }

  /** Checkpoints older than format 4 kept pending sends as the parent's TASKS writes. */
  private async migratePendingSends(checkpoint: Checkpoint, threadId: string, namespace: string, parentId: string): Promise<void> {
    const { result, attachment } = await this.rpc("lg/get", { threadId, namespace, checkpointId: parentId });
    const parent = (result as { tuple: WireTuple | null }).tuple;
    const sends = (parent?.writes ?? []).filter((w) => w.channel === TASKS);
    const values = await Promise.all(sends.map((w, i) => this.loads(w.type, segmentOf(attachment, w, `writes[${i}]`))));
    checkpoint.channel_values ??= {};
    checkpoint.channel_values[TASKS] = values;
    checkpoint.channel_versions ??= {};
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const c = config?.configurable;
    const threadId = c?.["thread_id"];
    if (threadId === undefined || threadId === null) return undefined;
    const checkpointId = getCheckpointId(config);
    const params: Record<string, unknown> = { threadId: String(threadId), namespace: namespaceOf(c) };
    if (checkpointId) params["checkpointId"] = String(checkpointId);
    const { result, attachment } = await this.rpc("lg/get", params);
    const t = (result as { tuple: WireTuple | null }).tuple;
    if (t === null || t === undefined) return undefined;
    const tuple = await this.decodeTuple(t, attachment);
    // as SqliteSaver: a config naming a checkpoint_id is the tuple's config as given
    if (checkpointId) tuple.config = config;
    return tuple;
  }

  async *list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple> {
    const { limit, before, filter } = options ?? {};
    const c = config?.configurable;
    const params: Record<string, unknown> = {};
    const threadId = c?.["thread_id"];
    if (threadId !== undefined && threadId !== null && threadId !== "") params["threadId"] = String(threadId);
    const ns = c?.["checkpoint_ns"];
    if (ns !== undefined && ns !== null) params["namespace"] = String(ns);
    const checkpointId = c?.["checkpoint_id"];
    if (checkpointId) params["checkpointId"] = String(checkpointId);
    const beforeId = before?.configurable?.["checkpoint_id"];
    if (beforeId !== undefined && beforeId !== null && beforeId !== "") params["before"] = String(beforeId);
    if (filter !== undefined && filter !== null) {
      const f = Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== undefined));
      if (Object.keys(f).length > 0) {
        params["metadata"] = await this.metadataToWire(f as CheckpointMetadata);
        params["metadataMatch"] = "javascript"; // JSON texts compared, as SqliteSaver does
      }
    }
    let remaining = Infinity;
    if (limit !== undefined && limit !== null) {
      remaining = Math.floor(Number(limit));
      if (!(remaining > 0)) return;
      if (remaining <= MAX_LIST_LIMIT) params["limit"] = remaining; // else: counted here
    }
    let page = this.rpc("lg/list", params);
    for (;;) {
      const { result, attachment } = await page;
      const r = result as { tuples: WireTuple[]; cursor?: string };
      const more = typeof r.cursor === "string" && r.cursor !== "" && remaining > r.tuples.length;
      // Prefetch the next page while this one is consumed.
      if (more) {
        page = this.rpc("lg/list", { ...params, cursor: r.cursor });
        page.catch(() => {}); // reported when awaited; not unhandled if the caller stops early
      }
      for (const t of r.tuples) {
        if (remaining-- <= 0) return;
        yield await this.decodeTuple(t, attachment);
      }
      if (!more) return;
    }
  }

  // -------------------------------------------------------------------------------------------
  // Writing

  async put(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, newVersions: ChannelVersions): Promise<RunnableConfig> {
    const c = requireConfigurable(config, "put");
    const threadId = requireThreadId(c, "put");
    const namespace = namespaceOf(c);
    const parentId = c["checkpoint_id"];
    if (typeof checkpoint?.id !== "string" || checkpoint.id === "") throw new Error("CkptdSaver.put: checkpoint.id is missing");

    const { channel_values: values, ...rest } = copyCheckpoint(checkpoint);
    const versions = newVersions ?? {};
    const channels = Object.keys(versions);
    const [[ctype, cbytes], wireMetadata, ...dumped] = await Promise.all([
      this.dumps(rest),
      this.metadataToWire(metadata),
      ...channels.map((ch) => (Object.prototype.hasOwnProperty.call(values, ch) ? this.dumps(values[ch]) : null)),
    ]);
    const checkpointSeg: Record<string, unknown> = { type: ctype };
    const segments: [Record<string, unknown>, Uint8Array][] = [[checkpointSeg, cbytes]];
    const blobs = channels.map((channel, i) => {
      const d = dumped[i] as [string, Uint8Array] | null;
      const version = versions[channel]!;
      if (d === null) return { channel, version, type: "empty", offset: 0, length: 0 };
      const seg: Record<string, unknown> = { channel, version, type: d[0] };
      segments.push([seg, d[1]]);
      return seg;
    });
    const params: Record<string, unknown> = {
      threadId,
      namespace,
      checkpointId: checkpoint.id,
      checkpoint: checkpointSeg,
      channelVersions: checkpoint.channel_versions ?? {},
      metadata: wireMetadata,
      blobs,
    };
    if (parentId !== undefined && parentId !== null && parentId !== "") params["parentId"] = String(parentId);
    if (this.retention !== undefined) params["retention"] = this.retention;
    const delta = await this.deltaPut(params, segments, threadId, namespace);
    if (delta === null) {
      await this.send("lg/put", params, segments, threadId);
    } else {
      try {
        await this.send("lg/put", delta.params, delta.segments, threadId);
      } catch (err) {
        if (!valueDeltaRefused(err)) throw err;
        await this.send("lg/put", params, segments, threadId); // the base is gone: send every value whole
      }
    }
    if (this.values !== null) {
      for (const [seg, bytes] of segments.slice(1)) {
        if (bytes.byteLength > 0) this.values.remember(JSON.stringify([threadId, seg["channel"]]), namespace, JSON.stringify(seg["version"]), bytes);
      }
    }
    return makeConfig(threadId, namespace, checkpoint.id);
  }

  /**
   * The put with each value that pays sent as a wire delta against the channel's last value put
   * (docs/protocol.md, lg/put "Value deltas"); null when none pays or the daemon takes none.
   */
  private async deltaPut(
    params: Record<string, unknown>,
    segments: [Record<string, unknown>, Uint8Array][],
    threadId: string,
    namespace: string,
  ): Promise<{ params: Record<string, unknown>; segments: [Record<string, unknown>, Uint8Array][] } | null> {
    if (this.values === null) return null;
    const c = await this.client();
    if (!c.serverInfo?.capabilities?.langgraph?.valueDeltas) return null;
    const out: [Record<string, unknown>, Uint8Array][] = [[{ ...segments[0]![0] }, segments[0]![1]]];
    let any = false;
    for (const [seg0, bytes] of segments.slice(1)) {
      const seg = { ...seg0 };
      const last = this.values.last(JSON.stringify([threadId, seg["channel"]]), namespace);
      const d = last === undefined ? null : valueDelta(last.state, bytes);
      if (last !== undefined && d !== null) {
        const delta: Record<string, unknown> = {
          baseVersion: JSON.parse(last.checkpointId) as string | number,
          keepPrefix: d.keepPrefix,
          keepSuffix: d.keepSuffix,
          sha256: createHash("sha256").update(bytes).digest("hex"),
        };
        if (d.copies.length > 0) delta["copies"] = d.copies;
        seg["delta"] = delta;
        out.push([seg, d.segment]);
        any = true;
      } else {
        out.push([seg, bytes]);
      }
    }
    if (!any) return null;
    // the blobs list refers to the segments' param objects: rebuild it from the copies (empty values kept)
    const bySeg = new Map<Record<string, unknown>, Record<string, unknown>>();
    segments.slice(1).forEach(([seg], i) => bySeg.set(seg, out[i + 1]![0]));
    const blobs = (params["blobs"] as Record<string, unknown>[]).map((b) => bySeg.get(b) ?? b);
    return { params: { ...params, checkpoint: out[0]![0], blobs }, segments: out };
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void> {
    const c = requireConfigurable(config, "putWrites");
    const threadId = requireThreadId(c, "putWrites");
    const checkpointId = c["checkpoint_id"];
    if (checkpointId === undefined || checkpointId === null || checkpointId === "") {
      throw new Error("CkptdSaver.putWrites: config.configurable.checkpoint_id is missing");
    }
    const dumped = await Promise.all(writes.map(([, value]) => this.dumps(value)));
    const segments: [Record<string, unknown>, Uint8Array][] = [];
    const wire = writes.map(([channel, _], i) => {
      const [type, bytes] = dumped[i]!;
      const special = (WRITES_IDX_MAP as Record<string, number | undefined>)[channel];
      const seg: Record<string, unknown> = { channel, idx: special ?? i, type };
      segments.push([seg, bytes]);
      return seg;
    });
    const params: Record<string, unknown> = { threadId, namespace: namespaceOf(c), checkpointId: String(checkpointId), taskId: String(taskId), writes: wire };
    if (taskPath !== undefined && taskPath !== null) params["taskPath"] = taskPath;
    await this.send("lg/putWrites", params, segments, threadId);
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.rpc("thread/delete", { threadId: String(threadId) });
  }

  /** Copies every checkpoint, write and channel value of a thread to another thread id. */
  async copyThread(sourceThreadId: string, targetThreadId: string): Promise<void> {
    await this.rpc("thread/copy", { sourceThreadId: String(sourceThreadId), targetThreadId: String(targetThreadId) });
  }

  /**
   * Prunes threads: `keep_latest` (default) keeps each namespace's latest checkpoint and what a
   * delta-channel replay of it needs; `delete` removes the threads.
   */
  async prune(threadIds: string[], strategy: "keep_latest" | "delete" = "keep_latest"): Promise<void> {
    await this.rpc("thread/prune", { threadIds: threadIds.map(String), strategy });
  }

  /** Deletes every checkpoint whose `metadata.run_id` is one of `runIds`. */
  async deleteForRuns(runIds: string[]): Promise<void> {
    await this.rpc("lg/deleteForRuns", { runIds: runIds.map(String) });
  }

  /**
   * Sets or reads the retention of LangGraph threads (`lg/configure`): `threadId`'s own, or
   * without it the database's, for every thread without its own. `retention` as the constructor's
   * option (fields not given are 0 = off); `inherit: true` removes it instead; neither only reads.
   * Resolves to the retention in force and where it comes from.
   */
  async configureRetention(options: { threadId?: string; retention?: CkptdRetention; inherit?: boolean } = {}): Promise<{
    threadId?: string;
    retention: Required<CkptdRetention>;
    source: "thread" | "database" | "daemon";
  }> {
    const params: Record<string, unknown> = {};
    if (options.threadId !== undefined) params["threadId"] = String(options.threadId);
    const r = checkRetention(options.retention);
    if (r !== undefined) params["retention"] = r;
    if (options.inherit) params["inherit"] = true;
    const { result } = await this.rpc("lg/configure", params);
    return result as { threadId?: string; retention: Required<CkptdRetention>; source: "thread" | "database" | "daemon" };
  }

  /** One round trip (`lg/channelHistory`) instead of the default walk of `getTuple` calls. */
  override async getDeltaChannelHistory(options: { config: RunnableConfig; channels: string[] }): Promise<Record<string, DeltaChannelHistory>> {
    const { config, channels } = options;
    if (channels.length === 0) return {};
    const c = config?.configurable;
    const threadId = c?.["thread_id"];
    if (threadId === undefined || threadId === null || threadId === "") {
      return Object.fromEntries(channels.map((ch) => [ch, { writes: [] }]));
    }
    const params: Record<string, unknown> = { threadId: String(threadId), namespace: namespaceOf(c), channels };
    const checkpointId = getCheckpointId(config);
    if (checkpointId) params["checkpointId"] = String(checkpointId);
    const { result, attachment } = await this.rpc("lg/channelHistory", params);
    const r = result as { channels: Record<string, { writes?: WireWrite[]; seed?: TypedSegment & { version: string | number } }> };
    const out: Record<string, DeltaChannelHistory> = {};
    await Promise.all(
      channels.map(async (ch) => {
        const h = r.channels?.[ch];
        const entry: DeltaChannelHistory = { writes: await this.decodeWrites(h?.writes, attachment) };
        if (h?.seed !== undefined && h.seed !== null) entry.seed = await this.loads(h.seed.type, segmentOf(attachment, h.seed, `channels.${ch}.seed`));
        out[ch] = entry;
      }),
    );
    return out;
  }

  /**
   * Channel versions: numbers (as LangGraph.js expects), `floor(current) + 1` plus a random
   * fraction, so that they stay increasing and unique across forks of a thread (ckptd stores a
   * channel value once per version and never replaces it). A string `current` (a thread written
   * by the Python saver) continues in the Python saver's string format.
   */
  override getNextVersion(current: number | undefined): number {
    return nextVersion(current as string | number | undefined) as number;
  }
}

/** @internal exported for tests */
export const _internals = { isPlainJson, jsonTextIsInert, jsonValueIsInert, nextVersion };
