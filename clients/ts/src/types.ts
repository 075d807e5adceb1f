/**
 * Protocol types (docs/protocol.md, protocolVersion 1). Field names are the wire's. Results are typed
 * with the fields the contract promises; servers may add fields at any time, so results keep them.
 */
import type { ResumeProblem } from "./errors.js";

/** Any JSON value. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
/** A JSON object (e.g. checkpoint `metadata`). */
export type JsonObject = { [key: string]: JsonValue };

/** A checkpoint's phase. */
export type Phase = "before_step" | "completed" | "failed" | "interrupted";
/** What a checkpoint's state is: UTF-8 JSON text, opaque bytes, or nothing. */
export type StateType = "json" | "bytes" | "none";

/** The error of a `failed` step. */
export interface StepError {
  message: string;
  retryable: boolean;
}

/** Notifications a client may opt in to with `initialize.events`. */
export type EventName = "checkpoint/saved" | "checkpoint/pruned" | "checkpoint/corrupted";

// ---------------------------------------------------------------------------------------------
// Lifecycle

export interface InitializeParams {
  clientName?: string;
  /** Notifications to receive. */
  events?: EventName[];
}

export interface Capabilities {
  attachments: boolean;
  stateTypes: string[];
  maxStateBytes: number;
  durability: string;
  events: string[];
  /** What the LangGraph methods (`lg/*`) offer; absent on a ckptd older than them. */
  langgraph?: {
    putValue: boolean;
    retention: boolean;
    metadataMatch: string[];
    maxThreadIdBytes: number;
    /** `lg/put` takes `blobs[i].delta` (absent on a ckptd older than value deltas). */
    valueDeltas?: boolean;
  };
  [key: string]: unknown;
}

export interface InitializeResult {
  serverName: string;
  serverVersion: string;
  protocolVersion: number;
  dbPath: string;
  capabilities: Capabilities;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

/**
 * `checkpoint/save` params as the client takes them. The state is given as `state` and always
 * travels as the frame's attachment (never base64 or inline JSON):
 * - a `Uint8Array` is sent as is, with `stateType: "bytes"` (or `"json"` if you say so, for
 *   already-serialized JSON text);
 * - anything else is `JSON.stringify`'d once and sent with `stateType: "json"`;
 * - `undefined` (or absent) saves a checkpoint without state.
 */
export interface SaveParams<S = unknown> {
  workflowId: string;
  namespace?: string;
  checkpointId?: string;
  parentId?: string;
  phase?: Phase;
  step?: number;
  stepName?: string;
  error?: StepError | null;
  state?: S | Uint8Array;
  /** Only with a `Uint8Array` state: what the bytes are (default `bytes`). */
  stateType?: "json" | "bytes";
  completedTasks?: unknown[];
  pendingTasks?: unknown[];
  workflowHash?: string;
  metadata?: JsonObject;
  /**
   * The source tree to fingerprint with this checkpoint for drift detection (docs/protocol.md,
   * `checkpoint/save`); servers without the `drift` capability ignore it.
   */
  sources?: Sources;
  /** The token of the caller's claim on the workflow (`workflow/claim`, docs/protocol.md "Claims"). */
  fencingToken?: number;
  /**
   * The step's score of its result, classified and stored with the checkpoint (docs/protocol.md,
   * "Validation and compensation"). A `confidence` of NaN or ±Infinity is sent as its name (JSON has
   * no number for it) and refused by the daemon with -32602 naming `validation.confidence`.
   */
  validation?: ValidationParams;
}

/** `checkpoint/save`'s `validation`. */
export interface ValidationParams {
  /** A number in [0, 1]. */
  confidence: number;
  message?: string;
  /** Any JSON, stored and returned with the checkpoint. */
  details?: JsonValue;
}

/** The status a confidence is classified as. */
export type ValidationStatus = "passed" | "warning" | "failed";

export interface ValidationThresholds {
  min: number;
  warning: number;
}

/** Where a failed validation recommends rolling back to (ckptd never rolls back by itself). */
export type Recommendation = { kind: "to_checkpoint"; checkpointId: string } | { kind: "full"; checkpointId?: undefined };

/** A save's (and a resume plan's) validation: the classification and its recommendation. */
export interface ValidationResult {
  status: ValidationStatus;
  confidence: number;
  thresholds: ValidationThresholds;
  recommendation?: Recommendation;
  [key: string]: unknown;
}

/** The validation stored with a checkpoint (`validation` of a summary). */
export interface ValidationInfo {
  status: ValidationStatus;
  confidence: number;
  thresholds: ValidationThresholds;
  message?: string;
  details?: JsonValue;
  [key: string]: unknown;
}

/**
 * Which files of a tree are fingerprinted for drift (mirrors the server's drift spec): paths
 * relative to `root` matching an `include` pattern (none = all) and no `exclude` pattern
 * (doublestar globs), honouring .gitignore unless `gitignore: false`.
 */
export interface SourcesSpec {
  root: string;
  include?: string[];
  exclude?: string[];
  /** Default true. */
  gitignore?: boolean;
  editorFiles?: boolean;
  /** Bounds of every scan of this tree (docs/protocol.md, "Bounds"). */
  limits?: DriftLimits;
}

/**
 * Bounds of a source scan; an absent field takes its default (1,000,000 paths, 4 GiB hashed,
 * 2 minutes). A scan that reaches one fails with -32006, `data.limit` naming it.
 */
export interface DriftLimits {
  maxFiles?: number;
  maxBytes?: number;
  timeoutMs?: number;
}

/** The source tree of a checkpoint: one spec (the server fingerprints one root per checkpoint). */
export type Sources = SourcesSpec;

export interface SaveResult {
  checkpointId: string;
  seq: number;
  createdAt: string;
  sizeBytes: number;
  storedBytes: number;
  sha256: string;
  deduplicated: boolean;
  /** The classification of the save's `validation`, if it had one. */
  validation?: ValidationResult;
  [key: string]: unknown;
}

/** A checkpoint without state or task lists (`checkpoint/list`, base of `checkpoint/load`). */
export interface CheckpointSummary {
  checkpointId: string;
  workflowId: string;
  namespace: string;
  seq: number;
  parentId: string | null;
  phase: Phase;
  step: number;
  stepName: string;
  error: StepError | null;
  workflowHash: string;
  metadata: JsonObject;
  createdAt: string;
  stateType: StateType;
  sizeBytes: number;
  storedBytes: number;
  sha256: string;
  completedTaskCount: number;
  pendingTaskCount: number;
  /** The validation saved with the checkpoint, if any. */
  validation?: ValidationInfo;
  [key: string]: unknown;
}

/** `checkpoint/load` params: by `checkpointId`, or the latest of `workflowId` (+ `namespace`). */
export type LoadParams = { checkpointId: string; workflowId?: undefined; namespace?: undefined } | { workflowId: string; namespace?: string; checkpointId?: undefined };

/** Client-side options for calls that return a state. */
export interface StateOptions {
  /**
   * Decode the state per `stateType` (default true): JSON states are `JSON.parse`d, byte states come
   * back as `Uint8Array`. With false, `state` is left undefined and only `stateBytes` is set.
   */
  decodeState?: boolean;
}

/** A stored pending write (`pendingWrites` of `checkpoint/load`). */
export interface PendingWrite {
  taskId: string;
  taskPath?: string;
  idx: number;
  channel: string;
  value?: JsonValue;
  valueBase64?: string;
  type?: string;
  [key: string]: unknown;
}

/** A corrupt checkpoint skipped by a latest-load / plan. */
export interface Recovered {
  checkpointId: string;
  reason: string;
}

/** The decoded state fields shared by `checkpoint/load` and `resume/plan` results. */
export interface StateFields<S> {
  stateType: StateType;
  /**
   * The state: the parsed JSON value (`json`), a `Uint8Array` (`bytes`), or `undefined` (`none`, or
   * `decodeState: false`).
   */
  state: S | undefined;
  /** The state bytes exactly as stored (the frame attachment), or `null` when there is no state. */
  stateBytes: Uint8Array | null;
}

export interface LoadResult<S = unknown> extends CheckpointSummary, StateFields<S> {
  completedTasks: unknown[];
  pendingTasks: unknown[];
  pendingWrites: PendingWrite[];
  recoveredFrom?: Recovered[];
}

export interface ListParams {
  workflowId?: string;
  namespace?: string;
  phase?: Phase;
  metadata?: JsonObject;
  /** A checkpointId: only older checkpoints are returned. */
  before?: string;
  /** 1-10000, default 100. */
  limit?: number;
  /** Only checkpoints saved with a validation of this status. */
  validation?: ValidationStatus;
}

export interface ListResult {
  checkpoints: CheckpointSummary[];
  [key: string]: unknown;
}

export type DeleteParams = { checkpointId: string; workflowId?: undefined } | { workflowId: string; checkpointId?: undefined };

export interface DeleteResult {
  deleted: number;
  [key: string]: unknown;
}

export interface PruneParams {
  workflowId?: string;
  keepLast?: number;
  olderThanSeconds?: number;
  dryRun?: boolean;
}

export interface PruneResult {
  deleted: number;
  freedBytes: number;
  dryRun: boolean;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Workflows

export interface Retention {
  /** 0 = unlimited. */
  keepLast?: number;
  maxAgeSeconds?: number;
  keepFirst?: boolean;
  idleTtlSeconds?: number;
}

/** Validation rules for one step (unset: the workflow's). */
export interface StepValidationConfig {
  minConfidence?: number;
  warningThreshold?: number;
  rollbackOnFailure?: boolean;
}

/** A workflow's validation rules (unset: defaults 0.7, 0.85, true). */
export interface ValidationConfig extends StepValidationConfig {
  /** Per-step overrides, by step name. */
  steps?: Record<string, StepValidationConfig>;
}

export interface CompensationConfig {
  /** Steps whose `completed` save needs a registered compensation (-32005 otherwise). */
  required: string[];
}

export interface ConfigureParams {
  workflowId: string;
  retention?: Retention;
  /** Sources fingerprinted by every save of the workflow; `null` removes them. */
  sources?: SourcesSpec | null;
  /** Replaces the validation rules (`{}`: the defaults). */
  validation?: ValidationConfig;
  /** Replaces the compensation rules. */
  compensation?: CompensationConfig;
}

export interface ConfigureResult {
  workflowId: string;
  retention: Required<Retention>;
  /** The validation rules in force, once configured. */
  validation?: Required<StepValidationConfig> & { steps?: Record<string, StepValidationConfig> };
  compensation?: CompensationConfig;
  [key: string]: unknown;
}

export interface CompleteParams {
  workflowId: string;
  /** Keep the checkpoints (default: delete them). */
  preserve?: boolean;
  /** The token of the caller's claim on the workflow. */
  fencingToken?: number;
}

export interface CompleteResult {
  workflowId: string;
  deleted: number;
  [key: string]: unknown;
}

export interface WorkflowListParams {
  resumableOnly?: boolean;
  /** Only resumable workflows whose claim is free (never claimed, released, lease run out), oldest first. */
  claimable?: boolean;
  /** Page size: 1-10000 (default 1000). */
  limit?: number;
  /** Continue a listing: the `cursor` of the previous page (opaque). */
  cursor?: string;
  /** `"updated"`: most recently updated first (the default); `"id"`: by workflowId. Claimable lists come oldest first unless `"id"`. */
  order?: "updated" | "id";
}

export interface WorkflowInfo {
  workflowId: string;
  count: number;
  latest: CheckpointSummary | null;
  resumable: boolean;
  completed: boolean;
  updatedAt: string;
  storedBytes: number;
  [key: string]: unknown;
}

export interface WorkflowListResult {
  workflows: WorkflowInfo[];
  /** Present when more workflows follow: pass it as `cursor` for the next page. */
  cursor?: string;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Pending writes

/** One write. A `Uint8Array` value is sent as `valueBase64`. */
export interface Write {
  channel: string;
  value?: JsonValue | Uint8Array;
  valueBase64?: string;
  type?: string;
  /** Defaults to the position in `writes`; negative = special write (replaces). */
  idx?: number;
}

export interface PutWritesParams {
  workflowId: string;
  namespace?: string;
  checkpointId: string;
  taskId: string;
  taskPath?: string;
  writes: Write[];
  /** The token of the caller's claim on the workflow. */
  fencingToken?: number;
}

export interface PutWritesResult {
  stored: number;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Resume

export interface ResumePlanParams {
  workflowId: string;
  namespace?: string;
  checkpointId?: string;
  workflowHash?: string;
  /** Return the plan despite problems (they come back in `warnings`). */
  force?: boolean;
  /** Source drift since the checkpoint is a warning, not a problem. */
  driftAsWarning?: boolean;
  /** Compare the recorded sources with the same tree checked out at this directory (another machine). */
  sourcesRoot?: string;
  /**
   * Plan from a rollback's target (the unfinished rollback's, else `toCheckpointId`, else the
   * newest checkpoint whose validation did not fail) and list the compensations to run first.
   */
  rollback?: boolean;
  toCheckpointId?: string;
}

export interface ResumePlan<S = unknown> extends StateFields<S> {
  checkpointId: string;
  workflowId: string;
  namespace: string;
  phase: Phase;
  step: number;
  stepName: string;
  /** The step to run next. */
  startStep: number;
  /** True when `startStep` re-runs the checkpoint's own step. */
  retry: boolean;
  reason: string;
  completedTasks: unknown[];
  pendingTasks: unknown[];
  warnings: ResumeProblem[];
  recoveredFrom?: Recovered[];
  /** The drift report, when the checkpoint was saved with `sources`. */
  drift?: DriftStatusResult;
  /** The checkpoint's stored validation with its recommendation. */
  validation?: ValidationResult;
  /** Compensations to run before resuming (`rollback: true`, or an unfinished rollback). */
  rollback?: ResumeRollback;
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Compensation log (docs/protocol.md, "Validation and compensation")

export interface RegisterCompensationParams {
  workflowId: string;
  namespace?: string;
  checkpointId?: string;
  stepName?: string;
  taskId?: string;
  /** Opaque JSON your rollback handler knows how to run (not null). */
  action: JsonValue;
  description: string;
}

export interface RegisterCompensationResult {
  compensationId: string;
  seq: number;
  [key: string]: unknown;
}

/** One compensation of a rollback. */
export interface RollbackAction {
  compensationId: string;
  seq: number;
  action: JsonValue;
  description: string;
  status: "pending" | "failed" | "done";
  stepName?: string;
  taskId?: string;
  checkpointId?: string;
  /** The last failure reported with `compensation/done`. */
  error?: string;
  [key: string]: unknown;
}

export interface RollbackProgress {
  total: number;
  done: number;
  failed: number;
  pending: number;
}

export interface RollbackPlanParams {
  workflowId: string;
  namespace?: string;
  toCheckpointId?: string;
  full?: boolean;
}

export interface RollbackPlanResult {
  rollbackId: string;
  workflowId: string;
  namespace: string;
  toCheckpointId?: string;
  full: boolean;
  createdAt: string;
  /** Still to run, newest registration first. */
  actions: RollbackAction[];
  progress: RollbackProgress;
  [key: string]: unknown;
}

export interface CompensationDoneParams {
  compensationId: string;
  rollbackId: string;
  ok: boolean;
  error?: string;
}

export interface CompensationDoneResult {
  compensationId: string;
  status: "done" | "failed";
  remaining: number;
  [key: string]: unknown;
}

export interface RollbackCompleteParams {
  rollbackId: string;
  /** Delete the rolled-back checkpoints. */
  prune?: boolean;
}

export interface RollbackCompleteResult {
  rollbackId: string;
  progress: RollbackProgress;
  pruned: number;
  [key: string]: unknown;
}

/** `resume/plan`'s `rollback`. */
export interface ResumeRollback {
  /** The unfinished rollback these actions belong to, if one is. */
  rollbackId?: string;
  toCheckpointId?: string;
  full: boolean;
  actions: RollbackAction[];
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Stats

export interface LatencyStats {
  count: number;
  p50Ms: number;
  p95Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** `stats` params: a workflow and a LangGraph thread whose footprint to report. */
export interface StatsParams {
  workflowId?: string;
  threadId?: string;
}

/** What values take: their bytes as saved, the bytes stored for them, and the ratio. */
export interface Footprint {
  logicalBytes: number;
  storedBytes: number;
  ratio: number;
}

export interface StatsResult {
  uptimeSeconds: number;
  counters: {
    saves: number;
    loads: number;
    failures: number;
    integrityFailures: number;
    bytesIn: number;
    bytesOut: number;
    deduplicated: number;
    pruned: number;
    /** Saves sent as a wire delta; their `bytesIn` count the middle sent, not the state rebuilt. */
    deltaSaves: number;
    [key: string]: number;
  };
  /** `save`/`load`: store time; every other key is a method name (e.g. `"lg/put"`). */
  latency: { save: LatencyStats; load: LatencyStats; [key: string]: LatencyStats };
  /** With `workflowId`: that workflow's footprint. */
  workflow?: Footprint & { workflowId: string };
  /** With `threadId`: that thread's footprint. */
  thread?: Footprint & { threadId: string };
  db: {
    path: string;
    sizeBytes: number;
    walBytes: number;
    workflows: number;
    checkpoints: number;
    states: number;
    statesStoredBytes: number;
    /** What every value takes: logical and stored bytes, their ratio, the chunks and runs stored. */
    storage?: Footprint & { chunks: number; runs: number };
    /** Deferred compression in this daemon (docs/protocol.md, `stats`). */
    compaction: { pendingStates: number; pendingBytes: number; compacted: number; savedBytes: number };
    /** In-memory cache of LangGraph channel values (by the SHA-256 of their stored bytes). */
    blobCache: { entries: number; bytes: number; maxBytes: number; hits: number; misses: number };
    chunkCache: { entries: number; bytes: number; maxBytes: number; hits: number; misses: number };
    /** Present once the database stopped accepting writes; every write then fails with -32006, `data.reason` = `reason`. */
    writesStopped?: {
      reason: "database damaged" | "database file removed" | "database file replaced" | "disk full";
      detail: string;
      since: string;
    };
    [key: string]: unknown;
  };
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Drift (docs/protocol.md, "Source drift")

export type DriftTarget =
  | { workflowId: string; namespace?: string; checkpointId?: undefined }
  | { checkpointId: string; workflowId?: undefined; namespace?: undefined };

/** One path whose state against the checkpoint changed (`drift/changed`). */
export interface DriftChange {
  path: string;
  kind: "changed" | "added" | "deleted" | "renamed" | "restored" | (string & {});
  /** `renamed`: the checkpoint's path it came from. */
  from?: string;
  [key: string]: unknown;
}

/** One path that differs from the checkpoint's fingerprint (`drift/status`). */
export interface DriftFileChange {
  path: string;
  oldSize: number;
  newSize: number;
  /** Hex BLAKE3-256 of the content; absent for added (old) / deleted (new) paths and symlinks. */
  oldHash?: string;
  newHash?: string;
  [key: string]: unknown;
}

/** `sourcesRoot`: compare with the same tree checked out at this directory (another machine's checkout). */
export type DriftStatusParams = DriftTarget & { limits?: DriftLimits; sourcesRoot?: string };

/** `drift/status` result. */
export interface DriftStatusResult {
  checkpointId: string;
  drifted: boolean;
  changed: DriftFileChange[];
  added: DriftFileChange[];
  deleted: DriftFileChange[];
  filesChecked: number;
  elapsedMs: number;
  fullScan?: boolean;
  warnings?: string[];
  /** Paths that could not be read now ("dir/", "./" for the root): `drifted` is then true. */
  unreadable?: string[];
  /** With `sourcesRoot`: the root the sources were recorded at (`root` is then the tree compared). */
  recordedRoot?: string;
  [key: string]: unknown;
}

export type DriftWatchParams = DriftTarget & { debounceMs?: number; limits?: DriftLimits };

export interface DriftWatchResult {
  watchId: string;
  [key: string]: unknown;
}

export interface DriftUnwatchParams {
  watchId: string;
}

// ---------------------------------------------------------------------------------------------
// Notifications (server → client)

export interface SavedEvent {
  checkpointId: string;
  workflowId: string;
  namespace: string;
  seq: number;
  phase: Phase;
  step: number;
  [key: string]: unknown;
}

export interface PrunedEvent {
  workflowId: string;
  checkpointIds: string[];
  reason: "retention" | "prune" | "idle" | "complete" | "rollback" | (string & {});
  [key: string]: unknown;
}

export interface CorruptedEvent {
  checkpointId: string;
  workflowId: string;
  reason: string;
  [key: string]: unknown;
}

export interface DriftChangedEvent {
  watchId: string;
  checkpointId: string;
  changes: DriftChange[];
  drifted: boolean;
  /** The batch comes from a full rescan (events lost, ignore rules changed, initial drift). */
  rescan?: boolean;
  reason?: string;
  /** The watch stopped by itself (a resource ran out; `reason` says which): its last notification. */
  stopped?: boolean;
  [key: string]: unknown;
}

/** Params of each known notification, by method. */
export interface NotificationParams {
  "checkpoint/saved": SavedEvent;
  "checkpoint/pruned": PrunedEvent;
  "checkpoint/corrupted": CorruptedEvent;
  "drift/changed": DriftChangedEvent;
}
export type NotificationMethod = keyof NotificationParams;

/** A known notification, discriminated by `method`. */
export type Notification<M extends NotificationMethod = NotificationMethod> = {
  [K in M]: { method: K; params: NotificationParams[K] };
}[M];

/** Any notification, including methods this client version does not know. */
export interface RawNotification {
  method: string;
  params: unknown;
}

// ---------------------------------------------------------------------------------------------
// Claims (docs/protocol.md, "Claims")

export interface ClaimParams {
  workflowId: string;
  /** Names the worker, e.g. `host:pid`. */
  owner: string;
  /** Integer, 1-86400. */
  leaseSeconds: number;
}

export interface RenewParams {
  workflowId: string;
  fencingToken: number;
  leaseSeconds: number;
}

export interface ReleaseParams {
  workflowId: string;
  fencingToken: number;
}

/** `workflow/claim` and `workflow/renew` result. */
export interface ClaimResult {
  workflowId: string;
  owner: string;
  /** The end of the lease by the database's clock: for people, never compare it with the local clock. */
  expiresAt: string;
  fencingToken: number;
  [key: string]: unknown;
}

export interface ReleaseResult {
  workflowId: string;
  fencingToken: number;
  /** False when the claim was released already. */
  released: boolean;
  [key: string]: unknown;
}
