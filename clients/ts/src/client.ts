/**
 * The ckptd client: spawns `ckptd --db PATH`, speaks JSON-RPC 2.0 over its stdin/stdout with
 * Content-Length framing and attachments, pipelines requests (matched by id), surfaces
 * notifications as events and as an async iterator, and turns a dead daemon into an immediate,
 * informative rejection of everything pending.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";

import { findBinary } from "./binary.js";
import { Claim, type ClaimOptions } from "./claim.js";
import { DeltaMemory, baseUnusable } from "./delta.js";
import { checkProtocolVersion } from "./version.js";
import "./dispose.js";
import { ClientClosedError, CkptdError, DaemonDiedError, ErrorCode, ProtocolError, errorFromRpc } from "./errors.js";
import { FrameReader, FramingError, encodeFrame, parseBody, type Frame } from "./framing.js";
import type {
  ClaimParams,
  ClaimResult,
  CompensationDoneParams,
  CompensationDoneResult,
  CompleteParams,
  CompleteResult,
  ConfigureParams,
  ConfigureResult,
  DeleteParams,
  DeleteResult,
  DriftStatusParams,
  DriftStatusResult,
  DriftUnwatchParams,
  DriftWatchParams,
  DriftWatchResult,
  EventName,
  InitializeParams,
  InitializeResult,
  ListParams,
  ListResult,
  LoadParams,
  LoadResult,
  Notification,
  NotificationMethod,
  NotificationParams,
  PruneParams,
  PruneResult,
  PutWritesParams,
  PutWritesResult,
  RawNotification,
  RegisterCompensationParams,
  RegisterCompensationResult,
  ReleaseParams,
  ReleaseResult,
  RenewParams,
  ResumePlan,
  ResumePlanParams,
  RollbackCompleteParams,
  RollbackCompleteResult,
  RollbackPlanParams,
  RollbackPlanResult,
  SaveParams,
  SaveResult,
  StateOptions,
  StateType,
  StatsParams,
  StatsResult,
  ValidationParams,
  WorkflowListParams,
  WorkflowListResult,
} from "./types.js";
import { Workflow, type WorkflowOptions } from "./workflow.js";
import { WorkflowListing } from "./listing.js";

/** How much of the daemon's stderr is kept for error reports. */
export const STDERR_TAIL_BYTES = 64 * 1024;
const DEFAULT_CLOSE_TIMEOUT_MS = 5000;
const CLIENT_NAME = "ckptd-ts";
const isWindows = process.platform === "win32";

export interface ClientOptions {
  /**
   * The database: a file path (`--db`), or a `postgres://` URL, which reaches the daemon in its
   * environment (`CKPTD_DB`), never on its command line. Default: ckptd's own default location.
   */
  db?: string;
  /** The ckptd binary (path, or a name looked up on PATH). Default: `$CKPTD_PATH`, then `ckptd` on PATH. */
  binary?: string;
  /** Extra command-line arguments, e.g. `["--durability", "normal", "--keep-last", "0"]`. */
  args?: string[];
  /** Notifications to opt in to (sent with `initialize`). */
  events?: EventName[];
  /** Sent as `initialize.clientName` (default `ckptd-ts`). */
  clientName?: string;
  /** Environment of the daemon and for binary lookup (default `process.env`). */
  env?: NodeJS.ProcessEnv;
  /** Working directory of the daemon. */
  cwd?: string;
  /** Send `initialize` on start (default true). */
  initialize?: boolean;
  /** How long `close()` waits for a clean exit before killing the daemon (default 5000 ms). */
  closeTimeoutMs?: number;
  /**
   * Keep the Node event loop alive while the client is open (default false: the client only holds
   * the loop while requests are pending, a notification iterator is waiting or a drift watch is
   * active, so a script that forgets `close()` still exits; the daemon then sees EOF and exits
   * cleanly).
   */
  keepAlive?: boolean;
  /** Called with every chunk the daemon writes to stderr (its logs). */
  onStderr?: (chunk: Buffer) => void;
  /**
   * Send a state as a wire delta (docs/protocol.md, "Wire deltas") when it is an edit of the last
   * state this client saved of the same workflow and namespace and the changed middle is under
   * half of it (default true). The client keeps that last state in memory (at most 256 workflows
   * and 64 MiB). `false`: every state is sent whole.
   */
  deltas?: boolean;
}

/** Per-call options. */
export interface CallOptions {
  /** Abort the wait for the reply (the request may still be executed by the server). */
  signal?: AbortSignal;
  /** Reject with a timeout error if no reply came within this many ms. */
  timeoutMs?: number;
}

/** A raw reply: the JSON-RPC result and the frame's attachment (if any). */
export interface Reply {
  result: unknown;
  attachment: Uint8Array | null;
}

/** How the daemon process ended. */
export interface ExitInfo {
  exitCode: number | null;
  signal: string | null;
  /** True when the exit followed `close()`/`shutdown()`. */
  expected: boolean;
  /** For an unexpected exit: the error every pending and later call gets. */
  error?: CkptdError;
}

/** Events emitted by {@link Client}. */
export type ClientEvents = {
  /** Every notification, including methods this client does not know. */
  notification: [RawNotification];
  "checkpoint/saved": [NotificationParams["checkpoint/saved"]];
  "checkpoint/pruned": [NotificationParams["checkpoint/pruned"]];
  "checkpoint/corrupted": [NotificationParams["checkpoint/corrupted"]];
  "drift/changed": [NotificationParams["drift/changed"]];
  /** The daemon process ended. */
  exit: [ExitInfo];
  /** An error reply that matched no request (`id: null`: the server could not parse a frame). */
  protocolError: [CkptdError];
  /** A chunk of the daemon's stderr. */
  stderr: [Buffer];
};

export interface NotificationsOptions<M extends NotificationMethod> {
  /** Only these methods (default: every known notification). */
  methods?: readonly M[];
  /** Ends the iteration when aborted. */
  signal?: AbortSignal;
}

interface Pending {
  method: string;
  resolve: (r: Reply) => void;
  reject: (e: unknown) => void;
  cleanup?: () => void;
}

const KNOWN_NOTIFICATIONS = new Set<string>(["checkpoint/saved", "checkpoint/pruned", "checkpoint/corrupted", "drift/changed"]);

/** Keeps the last `limit` bytes of a byte stream, concatenating lazily. */
class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  constructor(private readonly limit: number) {}
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    if (this.size > 2 * this.limit) this.compact();
  }
  private compact(): void {
    const all = Buffer.concat(this.chunks, this.size);
    const keep = all.subarray(Math.max(0, all.length - this.limit));
    this.chunks = [Buffer.from(keep)];
    this.size = keep.length;
  }
  toString(): string {
    if (this.size > this.limit || this.chunks.length > 1) this.compact();
    return this.chunks.length === 0 ? "" : this.chunks[0]!.toString("utf8");
  }
}

/** Iterator over notifications; buffers what arrives between `next()` calls. */
class NotificationQueue<M extends NotificationMethod> implements AsyncIterableIterator<Notification<M>> {
  private buffer: Notification<M>[] = [];
  private waiter: { resolve: (r: IteratorResult<Notification<M>>) => void; reject: (e: unknown) => void } | null = null;
  private done = false;
  private error: unknown = undefined;
  private readonly onAbort: (() => void) | undefined;

  constructor(
    private readonly filter: ReadonlySet<string> | null,
    private readonly detach: (q: NotificationQueue<M>) => void,
    private readonly setWaiting: (waiting: boolean) => void,
    private readonly signal: AbortSignal | undefined,
  ) {
    if (signal !== undefined) {
      this.onAbort = () => this.finish();
      if (signal.aborted) this.finish();
      else signal.addEventListener("abort", this.onAbort, { once: true });
    }
  }

  wants(method: string): boolean {
    return this.filter === null ? KNOWN_NOTIFICATIONS.has(method) : this.filter.has(method);
  }

  push(n: RawNotification): void {
    if (this.done) return;
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      this.setWaiting(false);
      w.resolve({ value: n as Notification<M>, done: false });
    } else {
      this.buffer.push(n as Notification<M>);
    }
  }

  /** Ends the iteration: normally, or (after buffered items) with `error`. */
  finish(error?: unknown): void {
    if (this.done) return;
    this.done = true;
    this.error = error;
    this.detach(this);
    if (this.signal !== undefined && this.onAbort !== undefined) this.signal.removeEventListener("abort", this.onAbort);
    if (this.waiter !== null) {
      const w = this.waiter;
      this.waiter = null;
      this.setWaiting(false);
      if (error !== undefined) {
        this.error = undefined;
        w.reject(error);
      } else w.resolve({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<Notification<M>>> {
    const n = this.buffer.shift();
    if (n !== undefined) return Promise.resolve({ value: n, done: false });
    if (this.done) {
      if (this.error !== undefined) {
        const e = this.error;
        this.error = undefined;
        return Promise.reject(e);
      }
      return Promise.resolve({ value: undefined, done: true });
    }
    if (this.waiter !== null) return Promise.reject(new Error("notifications(): next() called while a previous next() is pending"));
    return new Promise((resolve, reject) => {
      this.waiter = { resolve, reject };
      this.setWaiting(true);
    });
  }

  return(): Promise<IteratorResult<Notification<M>>> {
    this.buffer = [];
    this.finish();
    this.error = undefined;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

type Refable = { ref?: () => void; unref?: () => void };

const EMPTY = new Uint8Array(0);

function asPlainBytes(b: Uint8Array): Uint8Array {
  return Object.getPrototypeOf(b) === Uint8Array.prototype ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

const utf8 = new TextDecoder("utf-8");

/**
 * Turns the wire state fields of a load / plan result (`state`, `stateBase64` or the attachment)
 * into `state` + `stateBytes`.
 */
function decodeStateFields(result: unknown, attachment: Uint8Array | null, options: StateOptions | undefined): Record<string, unknown> {
  const r = { ...(result as Record<string, unknown>) };
  const stateType = (r["stateType"] ?? "none") as StateType;
  let bytes: Uint8Array | null = null;
  let value: unknown = undefined;
  let haveValue = false;
  if (r["stateAttachment"] === true) {
    bytes = asPlainBytes(attachment ?? EMPTY);
  } else if (typeof r["stateBase64"] === "string") {
    bytes = asPlainBytes(Buffer.from(r["stateBase64"], "base64"));
  } else if ("state" in r && stateType === "json") {
    value = r["state"];
    haveValue = true;
    bytes = asPlainBytes(Buffer.from(JSON.stringify(value), "utf8"));
  }
  delete r["stateAttachment"];
  delete r["stateBase64"];
  delete r["state"];
  const decode = options?.decodeState !== false;
  let state: unknown = undefined;
  if (decode && bytes !== null) {
    if (stateType === "json") state = haveValue ? value : JSON.parse(utf8.decode(bytes));
    else if (stateType === "bytes") state = bytes;
  }
  r["state"] = state;
  r["stateBytes"] = stateType === "none" ? null : bytes;
  return r;
}

/** Encodes a client-side state for `checkpoint/save`: bytes + stateType, or null for no state. */
function encodeState(state: unknown, stateType: "json" | "bytes" | undefined): { bytes: Uint8Array; type: "json" | "bytes" } | null {
  if (state === undefined) return null;
  if (state instanceof Uint8Array) return { bytes: state, type: stateType ?? "bytes" };
  if (state instanceof ArrayBuffer) return { bytes: new Uint8Array(state), type: stateType ?? "bytes" };
  if (stateType === "bytes") throw new TypeError("save: stateType 'bytes' needs a Uint8Array state");
  const text = JSON.stringify(state);
  if (text === undefined) throw new TypeError(`save: state of type ${typeof state} is not JSON-serializable`);
  return { bytes: Buffer.from(text, "utf8"), type: "json" };
}

/**
 * `checkpoint/save`'s `validation` on the wire: only its known names, and a confidence JSON has no
 * number for (NaN, ±Infinity; `JSON.stringify` would send `null`) as its name, which the daemon
 * refuses with -32602 naming `validation.confidence`.
 */
function validationParam(v: ValidationParams): Record<string, unknown> {
  const c = v.confidence;
  const confidence = typeof c === "number" && !Number.isFinite(c) ? (Number.isNaN(c) ? "NaN" : c > 0 ? "Infinity" : "-Infinity") : c;
  return {
    confidence,
    ...(v.message !== undefined ? { message: v.message } : {}),
    ...(v.details !== undefined ? { details: v.details } : {}),
  };
}

function timeoutError(method: string, ms: number): CkptdError {
  const e = new CkptdError(ErrorCode.InternalError, `ckptd: no reply to ${method} within ${ms} ms`, undefined, { method });
  e.name = "TimeoutError";
  return e;
}

/**
 * A connection to one ckptd daemon process. Create it with {@link Client.start}; close it with
 * {@link Client.close} (or `await using client = await Client.start(...)`).
 */
export class Client extends EventEmitter<ClientEvents> {
  /** The `initialize` result (undefined when started with `initialize: false` until you call it). */
  serverInfo: InitializeResult | undefined;
  /** The binary that was started. */
  readonly binary: string;

  private readonly child: ChildProcess;
  private readonly reader = new FrameReader();
  private readonly pending = new Map<number, Pending>();
  private readonly queues = new Set<NotificationQueue<NotificationMethod>>();
  private readonly stderrTail = new Tail(STDERR_TAIL_BYTES);
  private readonly keepAlive: boolean;
  private readonly closeTimeoutMs: number;
  private nextId = 1;
  private waitingIterators = 0;
  /** Active drift watches: they hold the event loop like pending requests (their notifications are awaited). */
  private readonly watches = new Set<string>();
  private refed = true;
  /** Set once no more requests can be sent: every later call rejects with it. */
  private failure: CkptdError | null = null;
  private closing = false;
  private shutdownSent = false;
  private exitInfo: ExitInfo | null = null;
  private closePromise: Promise<void> | null = null;
  private readonly exited: Promise<ExitInfo>;
  private exitCode: number | null = null;
  private exitSignal: NodeJS.Signals | null = null;

  /** The last state saved per (workflowId, namespace): the base of the next save's delta. */
  private readonly deltas: DeltaMemory | null;

  private constructor(child: ChildProcess, binary: string, options: ClientOptions) {
    super();
    this.child = child;
    this.binary = binary;
    this.keepAlive = options.keepAlive === true;
    this.deltas = options.deltas === false ? null : new DeltaMemory();
    this.closeTimeoutMs = options.closeTimeoutMs ?? DEFAULT_CLOSE_TIMEOUT_MS;
    const onStderr = options.onStderr;

    child.stdout!.on("data", (chunk: Buffer) => this.onData(chunk));
    child.stdout!.on("end", () => {
      try {
        this.reader.end();
      } catch (e) {
        this.fatal(e);
      }
    });
    child.stdout!.on("error", () => {}); // surfaced through 'close'
    child.stderr!.on("data", (chunk: Buffer) => {
      this.stderrTail.push(chunk);
      onStderr?.(chunk);
      if (this.listenerCount("stderr") > 0) this.emit("stderr", chunk);
    });
    child.stderr!.on("error", () => {});
    // EPIPE etc. when the daemon is gone: the 'close' handler reports the death.
    child.stdin!.on("error", () => {});
    child.on("exit", (code, signal) => {
      this.exitCode = code;
      this.exitSignal = signal;
    });
    this.exited = new Promise((resolve) => {
      child.on("close", (code: number | null, signal: NodeJS.Signals | null) => resolve(this.onClose(code ?? this.exitCode, signal ?? this.exitSignal)));
    });
    this.updateRef();
  }

  /**
   * Starts a daemon and (unless `initialize: false`) sends `initialize`. Rejects with
   * {@link BinaryNotFoundError} when no binary is found and {@link DaemonDiedError} (with its
   * stderr) when the daemon exits during start-up, e.g. on a bad flag or an unopenable database.
   */
  static async start(options: ClientOptions = {}): Promise<Client> {
    const binary = findBinary({ binary: options.binary, env: options.env });
    // A database URL may hold a password: it goes to the daemon in its environment (CKPTD_DB),
    // never on its command line, which every user of the machine can read.
    const url = options.db !== undefined && isDatabaseURL(options.db);
    const args = [...(options.db !== undefined && !url ? ["--db", options.db] : []), ...(options.args ?? [])];
    const env = url ? { ...(options.env ?? process.env), CKPTD_DB: options.db } : (options.env ?? process.env);
    const child = spawn(binary, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env,
      cwd: options.cwd,
      // Own process group: a terminal's Ctrl-C goes to the agent, which can still save an
      // `interrupted` checkpoint before the daemon stops; the daemon exits on stdin EOF.
      detached: !isWindows,
      windowsHide: true,
    });
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error) => {
        child.off("spawn", onSpawn);
        reject(new DaemonDiedError(`cannot start ckptd (${binary}): ${err.message}`, { exitCode: null, signal: null, stderr: "", cause: err }));
      };
      const onSpawn = () => {
        child.off("error", onError);
        resolve();
      };
      child.once("error", onError);
      child.once("spawn", onSpawn);
    });
    child.on("error", () => {}); // later errors (e.g. kill failures) surface through 'close'
    const client = new Client(child, binary, options);
    if (options.initialize !== false) {
      try {
        await client.initialize({ clientName: options.clientName ?? CLIENT_NAME, ...(options.events ? { events: options.events } : {}) });
      } catch (e) {
        await client.close({ timeoutMs: 1000 }).catch(() => {});
        throw e;
      }
    }
    return client;
  }

  /** The daemon's process id. */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** The last 64 KB of the daemon's stderr. */
  get stderr(): string {
    return this.stderrTail.toString();
  }

  /** True until the client is closed or the daemon died. */
  get isOpen(): boolean {
    return this.failure === null && !this.closing;
  }

  /** Number of requests waiting for a reply. */
  get pendingCount(): number {
    return this.pending.size;
  }

  // -------------------------------------------------------------------------------------------
  // Transport

  /**
   * Sends one request and resolves with its raw reply (result + attachment). Use the typed methods;
   * this is for methods newer than this client.
   */
  call(method: string, params?: unknown, options: CallOptions & { attachment?: Uint8Array | null } = {}): Promise<Reply> {
    if (this.failure !== null) return Promise.reject(this.failure);
    if (this.closing && method !== "shutdown") return Promise.reject(new ClientClosedError(`ckptd client is closing; ${method} not sent`));
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const id = this.nextId++;
    let body: string;
    try {
      body = JSON.stringify(params === undefined ? { jsonrpc: "2.0", id, method } : { jsonrpc: "2.0", id, method, params });
    } catch (e) {
      return Promise.reject(e); // BigInt, cycles: nothing was sent
    }
    return new Promise<Reply>((resolve, reject) => {
      const p: Pending = { method, resolve, reject };
      let timer: NodeJS.Timeout | undefined;
      let onAbort: (() => void) | undefined;
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => this.abandon(id, timeoutError(method, options.timeoutMs!)), options.timeoutMs);
      }
      if (signal !== undefined) {
        onAbort = () => this.abandon(id, signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
      }
      if (timer !== undefined || onAbort !== undefined) {
        p.cleanup = () => {
          if (timer !== undefined) clearTimeout(timer);
          if (onAbort !== undefined) signal!.removeEventListener("abort", onAbort);
        };
      }
      this.pending.set(id, p);
      this.updateRef();
      if (method === "shutdown") this.shutdownSent = true;
      this.write(body, options.attachment ?? null);
    });
  }

  /** Sends one request and resolves with its result. */
  async request<R = unknown>(method: string, params?: unknown, options?: CallOptions & { attachment?: Uint8Array | null }): Promise<R> {
    return (await this.call(method, params, options)).result as R;
  }

  private write(body: string, attachment: Uint8Array | null): void {
    const stdin = this.child.stdin!;
    const [head, att] = encodeFrame(body, attachment) as [Buffer, Uint8Array?];
    // One frame = contiguous bytes on the pipe: writes are queued in order; cork batches them
    // into a single writev.
    stdin.cork();
    stdin.write(head);
    if (att !== undefined) stdin.write(att);
    stdin.uncork();
  }

  private abandon(id: number, err: unknown): void {
    const p = this.pending.get(id);
    if (p === undefined) return;
    this.pending.delete(id);
    p.cleanup?.();
    this.updateRef();
    p.reject(err);
  }

  private onData(chunk: Buffer): void {
    if (this.failure instanceof ProtocolError) return;
    let frames: Frame[];
    try {
      frames = this.reader.push(chunk);
    } catch (e) {
      this.fatal(e);
      return;
    }
    for (const f of frames) this.onFrame(f);
  }

  private onFrame(frame: Frame): void {
    let msg: unknown;
    try {
      msg = parseBody(frame.body);
    } catch (e) {
      this.fatal(new Error(`ckptd sent a frame whose body is not UTF-8 JSON: ${(e as Error).message}`));
      return;
    }
    if (msg === null || typeof msg !== "object" || Array.isArray(msg)) {
      this.fatal(new Error("ckptd sent a frame that is not a JSON-RPC object"));
      return;
    }
    const m = msg as { id?: unknown; method?: unknown; params?: unknown; result?: unknown; error?: unknown };
    if (typeof m.method === "string") {
      if (m.id === undefined || m.id === null) this.onNotification({ method: m.method, params: m.params });
      // A server-to-client request: none is defined by protocol 1; ignore it.
      return;
    }
    const p = typeof m.id === "number" ? this.pending.get(m.id) : undefined;
    if (p === undefined) {
      // A reply to an abandoned request, or an error the server could not attribute (id null).
      if (m.error !== undefined && (m.id === null || m.id === undefined)) {
        const err = errorFromRpc(m.error);
        if (this.listenerCount("protocolError") > 0) this.emit("protocolError", err);
        else process.emitWarning(`ckptd reported an error for no request: ${err.message}`, "CkptdWarning");
      }
      return;
    }
    this.pending.delete(m.id as number);
    p.cleanup?.();
    this.updateRef();
    if (m.error !== undefined && m.error !== null) p.reject(errorFromRpc(m.error, p.method));
    else p.resolve({ result: m.result ?? null, attachment: frame.attachment });
  }

  private onNotification(n: RawNotification): void {
    for (const q of this.queues) if (q.wants(n.method)) q.push(n);
    this.emit("notification", n);
    if (KNOWN_NOTIFICATIONS.has(n.method)) (this.emit as (e: string, a: unknown) => boolean)(n.method, n.params);
  }

  /** The reply stream is broken (bad framing or JSON): nothing can be matched any more. */
  private fatal(cause: unknown): void {
    if (this.failure instanceof ProtocolError) return;
    const msg = cause instanceof FramingError ? `ckptd's stdout is not a valid frame stream (${cause.kind}): ${cause.message}` : `${(cause as Error).message}`;
    const err = new ProtocolError(ErrorCode.ParseError, msg, undefined, { cause });
    this.fail(err);
    try {
      this.child.kill("SIGKILL");
    } catch {
      /* already gone */
    }
  }

  /** Makes every pending and later call reject with `err`; ends notification iterators. */
  private fail(err: CkptdError, iteratorError: CkptdError | null = err): void {
    if (this.failure === null) this.failure = err;
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      p.cleanup?.();
      p.reject(err);
    }
    for (const q of [...this.queues]) q.finish(iteratorError ?? undefined);
    this.updateRef();
  }

  private onClose(code: number | null, signal: NodeJS.Signals | null): ExitInfo {
    const expected = this.closing || (this.shutdownSent && code === 0);
    let error: CkptdError | undefined;
    if (expected) {
      this.fail(new ClientClosedError(this.closing ? "ckptd client is closed" : "ckptd was shut down"), null);
    } else {
      const n = this.pending.size;
      const how = signal !== null ? `was killed by ${signal}` : `exited with code ${code}`;
      const tail = this.stderrTail.toString();
      const shortTail = tail.length > 4096 ? "…" + tail.slice(-4096) : tail;
      const message =
        `ckptd (pid ${this.child.pid}) ${how}` +
        (n > 0 ? `; ${n} pending request${n === 1 ? "" : "s"} failed` : "") +
        (tail.trim() !== "" ? `\n--- ckptd stderr (tail) ---\n${shortTail.trimEnd()}` : " (no stderr output)");
      error = this.failure instanceof ProtocolError ? this.failure : new DaemonDiedError(message, { exitCode: code, signal, stderr: tail });
      this.fail(error);
    }
    const info: ExitInfo = { exitCode: code, signal, expected, ...(error ? { error } : {}) };
    this.exitInfo = info;
    this.updateRef();
    this.emit("exit", info);
    return info;
  }

  /** Holds the event loop only while something waits on the daemon (see `keepAlive`). */
  private updateRef(): void {
    const want =
      this.exitInfo === null && (this.keepAlive || this.closing || this.pending.size > 0 || this.waitingIterators > 0 || this.watches.size > 0);
    if (want === this.refed) return;
    this.refed = want;
    for (const h of [this.child, this.child.stdin, this.child.stdout, this.child.stderr] as Refable[]) {
      if (want) h?.ref?.();
      else h?.unref?.();
    }
  }

  // -------------------------------------------------------------------------------------------
  // Notifications

  /**
   * An async iterator over notifications (those opted in to with `events` at start, and drift
   * notifications of `driftWatch`). It buffers from the moment it is created, ends when the client
   * is closed (or `signal` aborts, or you `break`), and throws the error if the daemon dies.
   */
  notifications<M extends NotificationMethod = NotificationMethod>(options: NotificationsOptions<M> = {}): AsyncIterableIterator<Notification<M>> {
    const filter = options.methods !== undefined ? new Set<string>(options.methods) : null;
    const q = new NotificationQueue<M>(
      filter,
      (x) => this.queues.delete(x as unknown as NotificationQueue<NotificationMethod>),
      (waiting) => {
        this.waitingIterators += waiting ? 1 : -1;
        this.updateRef();
      },
      options.signal,
    );
    if (this.failure !== null) q.finish(this.failure instanceof ClientClosedError ? undefined : this.failure);
    else this.queues.add(q as unknown as NotificationQueue<NotificationMethod>);
    return q;
  }

  // -------------------------------------------------------------------------------------------
  // Lifecycle

  /** Sends `initialize` (done by `start` unless `initialize: false`). Replaces the event opt-ins. */
  async initialize(params: InitializeParams = {}, options?: CallOptions): Promise<InitializeResult> {
    const r = await this.request<InitializeResult>("initialize", params, options);
    checkProtocolVersion(r);
    this.serverInfo = r;
    return r;
  }

  /**
   * Sends `shutdown`: the daemon commits every save received before it, answers, and exits 0.
   * Prefer {@link close}, which also ends stdin and reaps the process.
   */
  async shutdown(options?: CallOptions): Promise<null> {
    await this.request("shutdown", undefined, options);
    return null;
  }

  /**
   * Closes the client: sends `shutdown` (every acknowledged save is on disk), ends stdin, waits for
   * the daemon to exit, and kills it after `timeoutMs` (default `closeTimeoutMs`, 5 s). Idempotent;
   * never rejects. Later calls reject with {@link ClientClosedError}.
   */
  close(options: { timeoutMs?: number } = {}): Promise<void> {
    this.closePromise ??= this.doClose(options.timeoutMs ?? this.closeTimeoutMs);
    return this.closePromise;
  }

  private async doClose(timeoutMs: number): Promise<void> {
    if (this.exitInfo !== null) return;
    this.closing = true;
    this.updateRef();
    const deadline = Date.now() + timeoutMs;
    if (this.failure === null) {
      try {
        await this.request("shutdown", undefined, { timeoutMs: Math.max(1, timeoutMs) });
      } catch {
        /* dead, shutting down already, or too slow: ending stdin / killing handles it */
      }
    }
    this.child.stdin!.end();
    const timedOut = Symbol("timeout");
    const wait = (ms: number) => {
      let t: NodeJS.Timeout;
      return Promise.race([this.exited, new Promise<typeof timedOut>((r) => (t = setTimeout(() => r(timedOut), Math.max(0, ms))))]).finally(() =>
        clearTimeout(t),
      );
    };
    if ((await wait(deadline - Date.now())) === timedOut) {
      try {
        this.child.kill("SIGKILL");
      } catch {
        /* already gone */
      }
      await wait(2000);
    }
  }

  /** `await using client = await Client.start(...)` closes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // Checkpoints

  /**
   * `checkpoint/save`. The state is sent as the frame attachment: a `Uint8Array` as is
   * (`stateType: bytes`), anything else `JSON.stringify`'d once (`stateType: json`). Do not mutate
   * a `Uint8Array` state until the promise settles. A state that is an edit of the last one this
   * client saved of the workflow goes as a wire delta, its changed middle only (see
   * `ClientOptions.deltas`); if the daemon no longer has that base, it is sent whole.
   */
  async save<S = unknown>(params: SaveParams<S>, options?: CallOptions): Promise<SaveResult> {
    const { state, stateType, validation, ...fields } = params;
    const rest = validation === undefined ? fields : { ...fields, validation: validationParam(validation) };
    const enc = encodeState(state, stateType);
    const wire = enc === null ? rest : { ...rest, stateAttachment: true, stateType: enc.type };
    const ns = params.namespace ?? "";
    const plan = enc !== null && this.deltas !== null ? this.deltas.plan(params.workflowId, ns, enc.bytes) : null;
    let r: Reply;
    if (plan === null) {
      r = await this.call("checkpoint/save", wire, { ...options, attachment: enc?.bytes ?? null });
    } else {
      try {
        r = await this.call("checkpoint/save", { ...wire, stateDelta: plan.delta }, { ...options, attachment: plan.middle });
      } catch (e) {
        if (!baseUnusable(e, plan.delta.baseCheckpointId)) throw e;
        r = await this.call("checkpoint/save", wire, { ...options, attachment: enc!.bytes }); // the base is gone: whole
      }
    }
    const result = r.result as SaveResult;
    if (enc !== null && this.deltas !== null && typeof result?.checkpointId === "string") {
      // a caller's Uint8Array may change after the save: remember a copy
      const own = state instanceof Uint8Array || state instanceof ArrayBuffer ? Uint8Array.from(enc.bytes) : enc.bytes;
      this.deltas.remember(params.workflowId, ns, result.checkpointId, own);
    }
    return result;
  }

  /**
   * `checkpoint/load` by `checkpointId`, or the latest of `workflowId` (falling back past corrupt
   * ones, see `recoveredFrom`). The state comes as an attachment and is decoded per `stateType`.
   */
  async load<S = unknown>(params: LoadParams, options?: CallOptions & StateOptions): Promise<LoadResult<S>> {
    const r = await this.call("checkpoint/load", { ...params, attachment: true }, options);
    return decodeStateFields(r.result, r.attachment, options) as unknown as LoadResult<S>;
  }

  /** `checkpoint/list`: summaries, newest first. */
  list(params: ListParams = {}, options?: CallOptions): Promise<ListResult> {
    return this.request<ListResult>("checkpoint/list", params, options);
  }

  /** `checkpoint/delete` one checkpoint, or every checkpoint (and the configuration) of a workflow. */
  delete(params: DeleteParams, options?: CallOptions): Promise<DeleteResult> {
    return this.request<DeleteResult>("checkpoint/delete", params, options);
  }

  /** `checkpoint/prune`. */
  prune(params: PruneParams = {}, options?: CallOptions): Promise<PruneResult> {
    return this.request<PruneResult>("checkpoint/prune", params, options);
  }

  // -------------------------------------------------------------------------------------------
  // Workflows

  /** `workflow/configure`: the retention policy of a workflow. */
  configure(params: ConfigureParams, options?: CallOptions): Promise<ConfigureResult> {
    return this.request<ConfigureResult>("workflow/configure", params, options);
  }

  /** `workflow/complete`: no longer resumable; checkpoints deleted unless `preserve`. */
  complete(params: CompleteParams, options?: CallOptions): Promise<CompleteResult> {
    return this.request<CompleteResult>("workflow/complete", params, options);
  }

  /**
   * `workflow/list`, page by page: `for await (const wf of client.workflows())` asks for one page
   * at a time (`limit` per page, default 1000). Awaited, it answers `{ workflows }` holding every
   * workflow (it follows the cursors), as before paging; given `limit` or `cursor`, that one
   * page, with `cursor` when more follow. See {@link WorkflowListing}.
   */
  workflows(params: WorkflowListParams = {}, options?: CallOptions): WorkflowListing {
    return new WorkflowListing((p) => this.request<WorkflowListResult>("workflow/list", p, options), params);
  }

  /** `writes/put`: pending writes of a task. `Uint8Array` values are sent as `valueBase64`. */
  putWrites(params: PutWritesParams, options?: CallOptions): Promise<PutWritesResult> {
    const writes = params.writes.map((w) => {
      if (!(w.value instanceof Uint8Array)) return w;
      const { value, ...rest } = w;
      return { ...rest, valueBase64: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString("base64") };
    });
    return this.request<PutWritesResult>("writes/put", { ...params, writes }, options);
  }

  // -------------------------------------------------------------------------------------------
  // Claims (docs/protocol.md, "Claims")

  /** `workflow/claim`; rejects with {@link ClaimedError} (`owner`, `expiresAt`) while another worker's claim is live. */
  claimWorkflow(params: ClaimParams, options?: CallOptions): Promise<ClaimResult> {
    return this.request<ClaimResult>("workflow/claim", params, options);
  }

  /** `workflow/renew`: extends the lease of the claim holding `fencingToken`. */
  renewClaim(params: RenewParams, options?: CallOptions): Promise<ClaimResult> {
    return this.request<ClaimResult>("workflow/renew", params, options);
  }

  /** `workflow/release`. */
  releaseClaim(params: ReleaseParams, options?: CallOptions): Promise<ReleaseResult> {
    return this.request<ReleaseResult>("workflow/release", params, options);
  }

  /**
   * Claims a workflow and renews the lease in the background until `release()`: a {@link Claim}
   * (see `withClaim` for a scope that releases by itself). Rejects with {@link ClaimedError} while
   * another worker's claim is live.
   */
  claim(workflowId: string, options: ClaimOptions = {}): Promise<Claim> {
    return new Claim(this, workflowId, options).acquire();
  }

  /**
   * Runs `fn` under a claim of `workflowId`: claims it, renews in the background while `fn` runs,
   * and releases it when `fn` settles. Pass the claim to `client.workflow(id, { claim })` so its
   * saves carry the fencing token. Rejects with {@link ClaimLostError} if the lease was lost (or
   * with fn's own error, e.g. the {@link ClaimedError} of a save refused after a take-over).
   */
  async withClaim<T>(workflowId: string, options: ClaimOptions, fn: (claim: Claim) => T | Promise<T>): Promise<T> {
    const claim = await this.claim(workflowId, options);
    let value: T;
    try {
      value = await fn(claim);
    } catch (err) {
      claim.noteRefusal(err);
      try {
        await claim.release();
      } catch (relErr) {
        process.emitWarning(`ckptd: could not release the claim on ${workflowId}: ${String(relErr)}`, "CkptdWarning");
      }
      throw err;
    }
    await claim.release();
    claim.check();
    return value;
  }

  /**
   * `resume/plan`: where to restart, after validation. Rejects with {@link ResumeValidationError}
   * (`.problems`) unless `force`. The checkpoint's state is decoded like `load`'s.
   */
  async resumePlan<S = unknown>(params: ResumePlanParams, options?: CallOptions & StateOptions): Promise<ResumePlan<S>> {
    const r = await this.call("resume/plan", { ...params, attachment: true }, options);
    const plan = decodeStateFields(r.result, r.attachment, options);
    if (!Array.isArray(plan["warnings"])) plan["warnings"] = [];
    return plan as unknown as ResumePlan<S>;
  }

  /**
   * `stats`: counters, latencies, database sizes, and what the database's values take
   * (`db.storage`: logical and stored bytes, their ratio); with `workflowId` / `threadId`, also
   * that workflow's (`workflow`) or thread's (`thread`) footprint.
   */
  stats(params: StatsParams = {}, options?: CallOptions): Promise<StatsResult> {
    const wire: Record<string, string> = {};
    if (params.workflowId !== undefined) wire["workflowId"] = params.workflowId;
    if (params.threadId !== undefined) wire["threadId"] = params.threadId;
    return this.request<StatsResult>("stats", Object.keys(wire).length > 0 ? wire : undefined, options);
  }

  // -------------------------------------------------------------------------------------------
  // Drift

  /** `drift/status` of a checkpoint or of a workflow's latest checkpoint. */
  driftStatus(params: DriftStatusParams, options?: CallOptions): Promise<DriftStatusResult> {
    return this.request<DriftStatusResult>("drift/status", params, options);
  }

  /**
   * `drift/watch`: `drift/changed` notifications (events / `notifications()`) until unwatched. An
   * active watch holds the event loop (like a pending request) until `driftUnwatch` or `close`.
   */
  async driftWatch(params: DriftWatchParams, options?: CallOptions): Promise<DriftWatchResult> {
    const r = await this.request<DriftWatchResult>("drift/watch", params, options);
    this.watches.add(String(r.watchId));
    this.updateRef();
    return r;
  }

  /** `drift/unwatch`. */
  async driftUnwatch(params: DriftUnwatchParams, options?: CallOptions): Promise<unknown> {
    try {
      return await this.request<unknown>("drift/unwatch", params, options);
    } finally {
      this.watches.delete(String(params.watchId));
      this.updateRef();
    }
  }

  // -------------------------------------------------------------------------------------------
  // Compensation log (docs/protocol.md, "Validation and compensation")

  /**
   * `compensation/register`: how to undo a side effect (`action`: JSON your rollback handler runs),
   * durable once the promise resolves. Register before the side effect.
   */
  registerCompensation(params: RegisterCompensationParams, options?: CallOptions): Promise<RegisterCompensationResult> {
    return this.request<RegisterCompensationResult>("compensation/register", params, options);
  }

  /**
   * `rollback/plan`: begins a rollback (or continues the unfinished one: same `rollbackId`) and
   * returns the compensations still to run, newest registration first.
   */
  rollbackPlan(params: RollbackPlanParams, options?: CallOptions): Promise<RollbackPlanResult> {
    return this.request<RollbackPlanResult>("rollback/plan", params, options);
  }

  /** `compensation/done`: records durably that a rollback ran an action (`ok`) or that it failed. */
  compensationDone(params: CompensationDoneParams, options?: CallOptions): Promise<CompensationDoneResult> {
    return this.request<CompensationDoneResult>("compensation/done", params, options);
  }

  /** `rollback/complete`: ends a rollback whose actions all ran; `prune` deletes the rolled-back checkpoints. */
  rollbackComplete(params: RollbackCompleteParams, options?: CallOptions): Promise<RollbackCompleteResult> {
    return this.request<RollbackCompleteResult>("rollback/complete", params, options);
  }

  // -------------------------------------------------------------------------------------------
  // Workflow helper

  /**
   * A {@link Workflow} helper bound to this client: step / layer checkpoints, resume plans, and
   * `interrupted` checkpoints on SIGINT/SIGTERM. Applies `retention` with `workflow/configure`.
   */
  async workflow<S = unknown>(workflowId: string, options: WorkflowOptions<S> = {}): Promise<Workflow<S>> {
    if (typeof workflowId !== "string" || workflowId === "") throw new TypeError("workflow: workflowId must be a non-empty string");
    if (options.retention !== undefined) await this.configure({ workflowId, retention: options.retention });
    return new Workflow<S>(this, workflowId, options);
  }
}

/** Whether a `db` option names a PostgreSQL database (`postgres://` or `postgresql://`). */
export function isDatabaseURL(db: string): boolean {
  return /^postgres(ql)?:\/\//i.test(db);
}
