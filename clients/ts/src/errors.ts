/**
 * Typed errors. Every JSON-RPC error from ckptd becomes a {@link CkptdError} subclass chosen by its
 * code (see docs/protocol.md, "Errors"); `code`, `message` and `data` are kept as sent.
 */

/** JSON-RPC error codes used by ckptd (binding, docs/protocol.md). */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  CheckpointNotFound: -32001,
  CheckpointCorrupt: -32002,
  Conflict: -32003,
  TooLarge: -32004,
  ResumeValidationFailed: -32005,
  StorageUnavailable: -32006,
  ShuttingDown: -32007,
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** The JSON-RPC error object as received. */
export interface RpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** A problem found by `resume/plan` (`data.problems` of -32005, or `warnings` when forced). */
export interface ResumeProblem {
  /** `corrupt` | `schema_version` | `workflow_hash_mismatch` | `not_retryable` | `workflow_completed` | `drift` | `compensation_required` | newer codes. */
  code: string;
  message: string;
  checkpointId?: string;
  expected?: string;
  actual?: string;
  /** `compensation_required`: the step that saved `completed` without a registered compensation. */
  stepName?: string;
  [key: string]: unknown;
}

function dataField<T>(data: unknown, key: string): T | undefined {
  if (data !== null && typeof data === "object" && key in data) {
    return (data as Record<string, unknown>)[key] as T;
  }
  return undefined;
}

/** Base class of every error from ckptd or from the client's connection to it. */
export class CkptdError extends Error {
  /** The JSON-RPC error code (client-side errors use codes outside the JSON-RPC range, see subclasses). */
  readonly code: number;
  /** The error's `data` as sent by the server. */
  readonly data: unknown;
  /** The method of the request that failed, when known. */
  method: string | undefined;

  constructor(code: number, message: string, data?: unknown, options?: { method?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.data = data;
    this.method = options?.method;
  }

  /** The server-side error object (`{code, message, data?}`). */
  toJSON(): RpcErrorObject {
    return this.data === undefined ? { code: this.code, message: this.message } : { code: this.code, message: this.message, data: this.data };
  }
}

/** -32700 (malformed frame or JSON) or -32600 (not a valid request); also a garbled reply stream. */
export class ProtocolError extends CkptdError {
  get reason(): string | undefined {
    return dataField(this.data, "reason");
  }
}

/** -32601: the server does not know the method (an older ckptd?). */
export class MethodNotFoundError extends CkptdError {
  get methodName(): string | undefined {
    return dataField(this.data, "method");
  }
}

/** -32602: a param is missing, of the wrong type or out of range. */
export class InvalidParamsError extends CkptdError {
  get field(): string | undefined {
    return dataField(this.data, "field");
  }
  get reason(): string | undefined {
    return dataField(this.data, "reason");
  }
}

/** -32603: a bug in ckptd. */
export class InternalError extends CkptdError {}

/** -32001: the checkpoint / workflow does not exist. */
export class CheckpointNotFoundError extends CkptdError {
  get checkpointId(): string | undefined {
    return dataField(this.data, "checkpointId");
  }
  get workflowId(): string | undefined {
    return dataField(this.data, "workflowId");
  }
}

/** -32002: the stored checkpoint fails verification. */
export class CheckpointCorruptError extends CkptdError {
  get checkpointId(): string | undefined {
    return dataField(this.data, "checkpointId");
  }
  get reason(): string | undefined {
    return dataField(this.data, "reason");
  }
}

/** -32003: same checkpointId saved with different content, or used by another workflow. */
export class ConflictError extends CkptdError {
  get checkpointId(): string | undefined {
    return dataField(this.data, "checkpointId");
  }
}

/** -32004: state or frame over the server's limit. */
export class TooLargeError extends CkptdError {
  get limit(): number | undefined {
    return dataField(this.data, "limit");
  }
  get size(): number | undefined {
    return dataField(this.data, "size");
  }
}

/** -32005: `resume/plan` found problems; all of them are in `problems`. */
export class ResumeValidationError extends CkptdError {
  get problems(): ResumeProblem[] {
    const p = dataField<unknown>(this.data, "problems");
    return Array.isArray(p) ? (p as ResumeProblem[]) : [];
  }
}

/** -32006: disk full, I/O error, database locked too long. */
export class StorageUnavailableError extends CkptdError {
  get reason(): string | undefined {
    return dataField(this.data, "reason");
  }
}

/** -32007: the request arrived after `shutdown`. */
export class ShuttingDownError extends CkptdError {}

/** Code of {@link DaemonDiedError} (client side; outside the JSON-RPC reserved range). */
export const DAEMON_DIED = -1;
/** Code of {@link ClientClosedError} (client side). */
export const CLIENT_CLOSED = -2;

/**
 * The ckptd process exited (or was killed) while the client needed it. Every pending request is
 * rejected with it at once; later calls reject with it immediately. `stderr` is the tail (last
 * 64 KB) of the daemon's stderr, which usually says why.
 */
export class DaemonDiedError extends CkptdError {
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly stderr: string;
  constructor(message: string, info: { exitCode: number | null; signal: string | null; stderr: string; cause?: unknown }) {
    super(DAEMON_DIED, message, undefined, { cause: info.cause });
    this.exitCode = info.exitCode;
    this.signal = info.signal;
    this.stderr = info.stderr;
  }
}

/** The client was closed with `close()`; no more requests can be sent. */
export class ClientClosedError extends CkptdError {
  constructor(message = "ckptd client is closed") {
    super(CLIENT_CLOSED, message);
  }
}

/** No ckptd binary could be found; `tried` lists every place looked at and why it did not work. */
export class BinaryNotFoundError extends Error {
  readonly tried: ReadonlyArray<{ place: string; path?: string; reason: string }>;
  constructor(message: string, tried: ReadonlyArray<{ place: string; path?: string; reason: string }>) {
    super(message);
    this.name = "BinaryNotFoundError";
    this.tried = tried;
  }
}

type ErrorClass = new (code: number, message: string, data?: unknown, options?: { method?: string }) => CkptdError;

const byCode = new Map<number, ErrorClass>([
  [ErrorCode.ParseError, ProtocolError],
  [ErrorCode.InvalidRequest, ProtocolError],
  [ErrorCode.MethodNotFound, MethodNotFoundError],
  [ErrorCode.InvalidParams, InvalidParamsError],
  [ErrorCode.InternalError, InternalError],
  [ErrorCode.CheckpointNotFound, CheckpointNotFoundError],
  [ErrorCode.CheckpointCorrupt, CheckpointCorruptError],
  [ErrorCode.Conflict, ConflictError],
  [ErrorCode.TooLarge, TooLargeError],
  [ErrorCode.ResumeValidationFailed, ResumeValidationError],
  [ErrorCode.StorageUnavailable, StorageUnavailableError],
  [ErrorCode.ShuttingDown, ShuttingDownError],
]);

/** Turns a JSON-RPC error object into the matching {@link CkptdError} subclass. */
export function errorFromRpc(err: unknown, method?: string): CkptdError {
  const obj = (err !== null && typeof err === "object" ? err : {}) as Partial<RpcErrorObject>;
  const code = typeof obj.code === "number" ? obj.code : ErrorCode.InternalError;
  const message = typeof obj.message === "string" ? obj.message : `ckptd error ${code}`;
  const Cls = byCode.get(code) ?? CkptdError;
  return new Cls(code, message, obj.data, method === undefined ? undefined : { method });
}
