/**
 * A helper for step-wise and DAG executors: `before_step` / `completed` / `failed` checkpoints
 * around each step, `interrupted` on SIGINT/SIGTERM, resume plans, and layer-wise checkpoints that
 * carry the completed task ids so an executor can skip finished tasks. Steps can score their
 * result (`s.validate`) and register how to undo their side effects (`s.compensate`);
 * `wf.rollback(handler)` runs a rollback through your handler, durably (docs/protocol.md,
 * "Validation and compensation").
 */
import type { CallOptions, Client } from "./client.js";
import { CheckpointNotFoundError } from "./errors.js";
import type {
  CompleteResult,
  JsonObject,
  JsonValue,
  Phase,
  Recommendation,
  RegisterCompensationResult,
  ResumePlan,
  Retention,
  RollbackAction,
  RollbackProgress,
  SaveParams,
  SaveResult,
  Sources,
  StepError,
  ValidationParams,
  ValidationResult,
} from "./types.js";

/** A constructor of errors that count as retryable. */
export type ErrorClass = abstract new (...args: never[]) => unknown;

export interface WorkflowOptions<S = unknown> {
  /** Namespace (LangGraph's `checkpoint_ns`), default `""`. */
  namespace?: string;
  /** Digest of the workflow / DAG definition; saved with every checkpoint and checked on resume. */
  workflowHash?: string;
  /** Source tree(s) whose drift ckptd should track (sent with every save as `sources`). */
  sources?: Sources;
  /** Retention policy, applied with `workflow/configure` when the helper is created. */
  retention?: Retention;
  /** Thrown errors that are instances of these classes are saved as retryable failures. */
  retryableErrors?: readonly ErrorClass[];
  /** Metadata merged into every checkpoint's metadata. */
  metadata?: JsonObject;
  /** The state before the first step (when there is nothing to resume). */
  initialState?: S;
  /** Signals that save an `interrupted` checkpoint while a step runs (default SIGINT, SIGTERM; `[]` = none). */
  signals?: readonly NodeJS.Signals[];
}

/** What a step function gets. Assign `state` to set the state saved with the `completed` checkpoint. */
export interface StepContext<S = unknown> {
  /** The state: the workflow's current state on entry; whatever it is on return is saved. */
  state: S | undefined;
  readonly name: string;
  readonly index: number;
  /** True when this run retries the step the resume plan started at. */
  readonly retry: boolean;
  /** Aborted (with a {@link StepInterruptedError}) when a signal interrupts the step. */
  readonly signal: AbortSignal;
  readonly workflow: Workflow<S>;
  /**
   * Scores this step's result (`confidence` in [0, 1]); the `completed` checkpoint carries it and
   * ckptd classifies it under the workflow's rules. Afterwards `wf.lastValidation` has the
   * classification and `wf.rollbackRecommended` says whether to roll back. A confidence outside
   * [0, 1] (NaN included) makes the completed save, and so the step, reject with
   * `InvalidParamsError` naming `validation.confidence`.
   */
  validate(confidence: number, options?: { message?: string; details?: JsonValue }): void;
  /**
   * Registers how to undo a side effect this step is about to cause (`compensation/register`,
   * with the step's name and its `before_step` checkpoint): durable once it resolves, so await it
   * before the side effect.
   */
  compensate(action: JsonValue, description: string, options?: { taskId?: string }): Promise<RegisterCompensationResult>;
}

/** Runs one compensation of a rollback (`action.action` is the JSON you registered). */
export type RollbackHandler = (action: RollbackAction) => unknown;

export interface RollbackOptions {
  /** Roll back to this checkpoint (default: the unfinished rollback, else the recommendation). */
  toCheckpointId?: string;
  full?: boolean;
  /** Delete the rolled-back checkpoints (default true), so a later resume starts from the target. */
  prune?: boolean;
}

/** What {@link Workflow.rollback} did. */
export interface RollbackOutcome {
  rollbackId: string;
  toCheckpointId?: string;
  full: boolean;
  /** The actions the handler ran in this call, in order. */
  ran: RollbackAction[];
  progress: RollbackProgress;
  pruned: number;
}

/**
 * A rollback handler threw for `action`: the failure is recorded (`compensation/done` with `ok:
 * false`) and the rollback stops there, unfinished; the next `wf.rollback` runs that action again.
 */
export class RollbackFailedError extends Error {
  readonly action: RollbackAction;
  readonly rollbackId: string;
  constructor(action: RollbackAction, cause: unknown, rollbackId: string) {
    super(`compensation ${action.compensationId} (${action.description}) failed: ${describe(cause)}`, { cause });
    this.name = "RollbackFailedError";
    this.action = action;
    this.rollbackId = rollbackId;
  }
}

export interface StepOptions {
  /** Overrides the retryable classification of a failure. */
  retryable?: boolean | ((error: unknown) => boolean);
  /** Extra metadata for this step's checkpoints. */
  metadata?: JsonObject;
}

export interface LayerParams<S = unknown> {
  /** Every task id completed so far (cumulative). */
  completedTasks: unknown[];
  /** Tasks still to run. */
  pendingTasks?: unknown[];
  /** The state after the layer (default: the workflow's current state). */
  state?: S;
  /**
   * `completed` (default): layer k is done, resume starts at k+1. `before_step`: layer k is in
   * progress; resume re-runs k, skipping `completedTasks`.
   */
  phase?: Phase;
  stepName?: string;
  metadata?: JsonObject;
}

/** The reason a step's `signal` is aborted. */
export class StepInterruptedError extends Error {
  readonly signalName: NodeJS.Signals;
  constructor(signal: NodeJS.Signals) {
    super(`step interrupted by ${signal}`);
    this.name = "StepInterruptedError";
    this.signalName = signal;
  }
}

// ---------------------------------------------------------------------------------------------
// Signal handling shared by every running step of every workflow in the process.

interface ActiveStep {
  signals: ReadonlySet<NodeJS.Signals>;
  interrupt(signal: NodeJS.Signals): Promise<void>;
}

const INTERRUPT_SAVE_TIMEOUT_MS = 10_000;
const activeSteps = new Set<ActiveStep>();
const installed = new Map<NodeJS.Signals, () => void>();
let interrupting = false;

function installFor(step: ActiveStep): void {
  activeSteps.add(step);
  for (const sig of step.signals) {
    if (installed.has(sig)) continue;
    const listener = () => void onSignal(sig);
    installed.set(sig, listener);
    process.on(sig, listener);
  }
}

function uninstallFor(step: ActiveStep): void {
  activeSteps.delete(step);
  if (interrupting) return; // onSignal re-raises once the interrupted checkpoints are saved
  for (const [sig, listener] of installed) {
    if ([...activeSteps].some((s) => s.signals.has(sig))) continue;
    process.off(sig, listener);
    installed.delete(sig);
  }
}

function uninstallAll(): void {
  for (const [sig, listener] of installed) process.off(sig, listener);
  installed.clear();
}

/** Re-raises `signal` with default behaviour (or whatever other listeners the program has). */
function reraise(signal: NodeJS.Signals): void {
  uninstallAll();
  if (process.platform === "win32") process.exit(128 + (signal === "SIGINT" ? 2 : 15));
  process.kill(process.pid, signal);
}

async function onSignal(signal: NodeJS.Signals): Promise<void> {
  if (interrupting) {
    reraise(signal); // a second signal while saving: stop now
    return;
  }
  interrupting = true;
  const steps = [...activeSteps].filter((s) => s.signals.has(signal));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.allSettled(steps.map((s) => s.interrupt(signal))),
    new Promise((r) => (timer = setTimeout(r, INTERRUPT_SAVE_TIMEOUT_MS))),
  ]);
  clearTimeout(timer);
  reraise(signal);
  // Normally the process is gone now; if the program's own listeners kept it alive, later
  // signals are handled afresh.
  interrupting = false;
}

// ---------------------------------------------------------------------------------------------

function describe(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  try {
    return typeof err === "string" ? err : JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

function taskKey(t: unknown): string {
  return typeof t === "string" ? `s:${t}` : `j:${JSON.stringify(t)}`;
}

type Snapshot = { state: Uint8Array; stateType: "json" | "bytes" } | { state?: undefined; stateType?: undefined };

/** Serializes a state once so the same bytes can be saved several times. */
function snapshot(state: unknown): Snapshot {
  if (state === undefined) return {};
  if (state instanceof Uint8Array) return { state: Uint8Array.from(state), stateType: "bytes" };
  const text = JSON.stringify(state);
  if (text === undefined) throw new TypeError(`workflow state of type ${typeof state} is not JSON-serializable`);
  return { state: Buffer.from(text, "utf8"), stateType: "json" };
}

/**
 * Checkpointing for one workflow. Create with `client.workflow(id, options)`.
 *
 * ```ts
 * const wf = await client.workflow("wf-1", { workflowHash });
 * await wf.resume();                       // null on a fresh start
 * for (const [i, name] of steps.entries()) {
 *   if (!wf.shouldRun(i)) continue;        // done before the crash
 *   await wf.step(name, i, async (s) => { s.state = await run(name, s.state); });
 * }
 * ```
 */
export class Workflow<S = unknown> {
  readonly workflowId: string;
  readonly namespace: string;
  readonly workflowHash: string | undefined;
  readonly sources: Sources | undefined;
  /** The current state: the plan's on resume, then each completed step's / layer's. */
  state: S | undefined;
  /** The plan of the last `resume()` (null: fresh start or not resumed). */
  plan: ResumePlan<S> | null = null;
  /** The id of the last checkpoint saved or resumed from (the next save's `parentId`). */
  lastCheckpointId: string | undefined;
  /** The classification of the last completed step's validation (or the resumed checkpoint's). */
  lastValidation: ValidationResult | null = null;
  /** Where to roll back to: set by a failed validation (with `rollbackOnFailure`). */
  recommendation: Recommendation | null = null;
  /** The rollbackId of an unfinished rollback `resume()` found. */
  unfinishedRollback: string | null = null;

  private readonly client: Client;
  private readonly retryableErrors: readonly ErrorClass[];
  private readonly metadata: JsonObject | undefined;
  private readonly signals: ReadonlySet<NodeJS.Signals>;
  private readonly initialState: S | undefined;
  private completed: unknown[] = [];
  private pending: unknown[] = [];
  private doneKeys = new Set<string>();

  /** Use `client.workflow(...)`. */
  constructor(client: Client, workflowId: string, options: WorkflowOptions<S> = {}) {
    this.client = client;
    this.workflowId = workflowId;
    this.namespace = options.namespace ?? "";
    this.workflowHash = options.workflowHash;
    this.sources = options.sources;
    this.retryableErrors = options.retryableErrors ?? [];
    this.metadata = options.metadata;
    this.signals = new Set(options.signals ?? ["SIGINT", "SIGTERM"]);
    this.state = options.initialState;
    this.initialState = options.initialState;
  }

  /**
   * True when the last step's validation failed and its rules roll back on failure, or when
   * `resume()` found a rollback that did not finish: call {@link rollback}.
   */
  get rollbackRecommended(): boolean {
    return this.recommendation !== null || this.unfinishedRollback !== null;
  }

  /** The step to start at: the plan's `startStep`, or 0. */
  get startStep(): number {
    return this.plan?.startStep ?? 0;
  }

  /** Task ids completed so far (from the plan, then from `layer()` saves). */
  get completedTasks(): readonly unknown[] {
    return this.completed;
  }

  /** Pending tasks (from the plan, then from `layer()` saves). */
  get pendingTasks(): readonly unknown[] {
    return this.pending;
  }

  /** True if step / layer `index` still has to run (it is at or after `startStep`). */
  shouldRun(index: number): boolean {
    return index >= this.startStep;
  }

  /** True if `task` is in `completedTasks` (strings compare as such, other values by their JSON). */
  isTaskDone(task: unknown): boolean {
    return this.doneKeys.has(taskKey(task));
  }

  /**
   * Asks ckptd where to restart (`resume/plan`) and adopts the plan: `state`, `startStep`,
   * `completedTasks`, `pendingTasks`. Returns null when the workflow has no checkpoint (fresh
   * start). Rejects with `ResumeValidationError` when the plan has problems (hash mismatch,
   * non-retryable failure, corruption...) unless `force`.
   */
  async resume(options: { force?: boolean; checkpointId?: string } & CallOptions = {}): Promise<ResumePlan<S> | null> {
    const { force, checkpointId, ...call } = options;
    let plan: ResumePlan<S>;
    try {
      plan = await this.client.resumePlan<S>(
        {
          workflowId: this.workflowId,
          namespace: this.namespace,
          ...(this.workflowHash !== undefined ? { workflowHash: this.workflowHash } : {}),
          ...(checkpointId !== undefined ? { checkpointId } : {}),
          ...(force !== undefined ? { force } : {}),
        },
        call,
      );
    } catch (e) {
      if (e instanceof CheckpointNotFoundError && checkpointId === undefined) {
        this.plan = null;
        this.noteValidation(undefined);
        this.unfinishedRollback = null;
        return null;
      }
      throw e;
    }
    this.plan = plan;
    this.noteValidation(plan.validation);
    this.unfinishedRollback = plan.rollback?.rollbackId ?? null;
    if (plan.stateType !== "none") this.state = plan.state;
    this.setTasks(plan.completedTasks ?? [], plan.pendingTasks ?? []);
    this.lastCheckpointId = plan.checkpointId;
    return plan;
  }

  /**
   * Saves a checkpoint of this workflow: fills in workflowId, namespace, workflowHash, sources,
   * parentId (the last checkpoint) and the workflow's metadata.
   */
  async save(params: Omit<SaveParams<S>, "workflowId" | "namespace">, options?: CallOptions): Promise<SaveResult> {
    const metadata = this.metadata !== undefined || params.metadata !== undefined ? { ...this.metadata, ...params.metadata } : undefined;
    const full: SaveParams<S> = {
      workflowId: this.workflowId,
      namespace: this.namespace,
      ...(this.workflowHash !== undefined ? { workflowHash: this.workflowHash } : {}),
      ...(this.sources !== undefined ? { sources: this.sources } : {}),
      ...(this.lastCheckpointId !== undefined ? { parentId: this.lastCheckpointId } : {}),
      ...params,
      ...(metadata !== undefined ? { metadata } : {}),
    };
    const r = await this.client.save(full, options);
    this.lastCheckpointId = r.checkpointId;
    return r;
  }

  /**
   * Runs step `index` named `name`: saves `before_step` (with the input state), runs `fn`, then
   * saves `completed` with `s.state` and returns fn's value. If fn throws, saves `failed` (error
   * `{message, retryable}`, the input state) and rethrows. If SIGINT/SIGTERM arrives while fn runs,
   * saves `interrupted` (the input state) and re-raises the signal.
   */
  async step<T>(name: string, index: number, fn: (s: StepContext<S>) => T | Promise<T>, options: StepOptions = {}): Promise<T> {
    if (!Number.isSafeInteger(index) || index < 0) throw new RangeError(`step: index must be an integer ≥ 0, got ${index}`);
    const input = snapshot(this.state);
    const meta = options.metadata !== undefined ? { metadata: options.metadata } : {};
    const before = await this.save({ phase: "before_step", step: index, stepName: name, ...input, ...meta });

    const controller = new AbortController();
    let validation: ValidationParams | undefined;
    const ctx: StepContext<S> = {
      state: this.state,
      name,
      index,
      retry: this.plan !== null && this.plan.retry && this.plan.startStep === index,
      signal: controller.signal,
      workflow: this,
      validate: (confidence, opts = {}) => {
        validation = {
          confidence,
          ...(opts.message !== undefined ? { message: opts.message } : {}),
          ...(opts.details !== undefined ? { details: opts.details } : {}),
        };
      },
      compensate: (action, description, opts = {}) =>
        this.client.registerCompensation({
          workflowId: this.workflowId,
          namespace: this.namespace,
          checkpointId: before.checkpointId,
          stepName: name,
          ...(opts.taskId !== undefined ? { taskId: opts.taskId } : {}),
          action,
          description,
        }),
    };
    let interrupted: Promise<void> | null = null;
    const active: ActiveStep = {
      signals: this.signals,
      interrupt: (signal) => {
        interrupted ??= (async () => {
          controller.abort(new StepInterruptedError(signal));
          await this.save({ phase: "interrupted", step: index, stepName: name, ...input, ...meta });
        })();
        return interrupted;
      },
    };
    if (this.signals.size > 0) installFor(active);
    let value: T;
    try {
      value = await fn(ctx);
    } catch (err) {
      uninstallFor(active);
      if (interrupted !== null) {
        await (interrupted as Promise<void>).catch(() => {});
        throw err;
      }
      const error: StepError = { message: describe(err), retryable: this.classify(err, options.retryable) };
      try {
        await this.save({ phase: "failed", step: index, stepName: name, error, ...input, ...meta });
      } catch (saveErr) {
        process.emitWarning(`ckptd: could not save the failed checkpoint of step ${index} (${name}): ${describe(saveErr)}`, "CkptdWarning");
      }
      throw err;
    }
    uninstallFor(active);
    if (interrupted !== null) {
      // The process is about to re-raise the signal; the interrupted checkpoint is the record.
      await (interrupted as Promise<void>).catch(() => {});
      return value;
    }
    const done = await this.save({
      phase: "completed",
      step: index,
      stepName: name,
      ...snapshot(ctx.state),
      ...meta,
      ...(validation !== undefined ? { validation } : {}),
    });
    this.state = ctx.state;
    this.noteValidation(done.validation);
    return value;
  }

  /**
   * Rolls the workflow back: `rollback/plan` (the unfinished rollback, else `toCheckpointId` /
   * `full`, else the recommendation), then `handler(action)` for each compensation still to run,
   * newest registration first, each marked done durably once the handler resolves; then
   * `rollback/complete` (`prune`, default true: the rolled-back checkpoints are deleted) and the
   * target's resume plan is adopted (`startStep`, `state`; from scratch after a full rollback).
   *
   * A process killed part-way leaves the rollback unfinished: `resume()` in the next one sets
   * `rollbackRecommended`, and `rollback(handler)` runs only the actions not marked done (one
   * whose handler finished just before the kill, before it was marked, runs again: keep handlers
   * idempotent). A handler that throws stops it with {@link RollbackFailedError}, recorded; the
   * next call runs that action again.
   */
  async rollback(handler: RollbackHandler, options: RollbackOptions & CallOptions = {}): Promise<RollbackOutcome> {
    const { toCheckpointId, full, prune = true, ...call } = options;
    const plan = await this.client.rollbackPlan(
      { workflowId: this.workflowId, namespace: this.namespace, ...this.rollbackTarget(toCheckpointId, full ?? false) },
      call,
    );
    const ran: RollbackAction[] = [];
    for (const act of plan.actions) {
      try {
        await handler(act);
      } catch (err) {
        await this.client.compensationDone({ compensationId: act.compensationId, rollbackId: plan.rollbackId, ok: false, error: describe(err) }, call);
        throw new RollbackFailedError(act, err, plan.rollbackId);
      }
      await this.client.compensationDone({ compensationId: act.compensationId, rollbackId: plan.rollbackId, ok: true }, call);
      ran.push(act);
    }
    const done = await this.client.rollbackComplete({ rollbackId: plan.rollbackId, ...(prune ? { prune: true } : {}) }, call);
    this.unfinishedRollback = null;
    this.noteValidation(undefined);
    if (plan.full) {
      this.plan = null;
      this.state = this.initialState;
      this.setTasks([], []);
      this.lastCheckpointId = undefined;
    } else if (plan.toCheckpointId !== undefined) {
      await this.resume({ checkpointId: plan.toCheckpointId, ...call });
    }
    return {
      rollbackId: plan.rollbackId,
      ...(plan.toCheckpointId !== undefined ? { toCheckpointId: plan.toCheckpointId } : {}),
      full: plan.full,
      ran,
      progress: done.progress,
      pruned: done.pruned,
    };
  }

  /** rollback/plan's target: explicit, else continue the unfinished one, else the recommendation. */
  private rollbackTarget(toCheckpointId: string | undefined, full: boolean): { toCheckpointId?: string; full?: boolean } {
    if (toCheckpointId !== undefined) return { toCheckpointId };
    if (full) return { full: true };
    const rec = this.recommendation;
    if (this.unfinishedRollback === null && rec !== null) return rec.kind === "full" ? { full: true } : { toCheckpointId: rec.checkpointId };
    return {};
  }

  private noteValidation(v: ValidationResult | undefined): void {
    this.lastValidation = v ?? null;
    this.recommendation = v?.recommendation ?? null;
  }

  /**
   * Saves one checkpoint for DAG layer `k` with its (cumulative) completed task ids. With the
   * default phase `completed`, a resume starts at layer k+1; with `before_step`, it re-runs layer k
   * and `isTaskDone()` tells which of its tasks already finished.
   */
  async layer(k: number, params: LayerParams<S>, options?: CallOptions): Promise<SaveResult> {
    if (!Number.isSafeInteger(k) || k < 0) throw new RangeError(`layer: k must be an integer ≥ 0, got ${k}`);
    const state = "state" in params && params.state !== undefined ? params.state : this.state;
    const r = await this.save(
      {
        phase: params.phase ?? "completed",
        step: k,
        stepName: params.stepName ?? `layer-${k}`,
        ...snapshot(state),
        completedTasks: params.completedTasks,
        pendingTasks: params.pendingTasks ?? [],
        ...(params.metadata !== undefined ? { metadata: params.metadata } : {}),
      },
      options,
    );
    this.state = state;
    this.setTasks(params.completedTasks, params.pendingTasks ?? []);
    return r;
  }

  /** `workflow/complete`: the workflow is done (no longer resumable). */
  complete(options: { preserve?: boolean } & CallOptions = {}): Promise<CompleteResult> {
    const { preserve, ...call } = options;
    return this.client.complete({ workflowId: this.workflowId, ...(preserve !== undefined ? { preserve } : {}) }, call);
  }

  private setTasks(completed: unknown[], pending: unknown[]): void {
    this.completed = [...completed];
    this.pending = [...pending];
    this.doneKeys = new Set(this.completed.map(taskKey));
  }

  private classify(err: unknown, override: StepOptions["retryable"]): boolean {
    if (typeof override === "boolean") return override;
    if (typeof override === "function") return override(err);
    if (err !== null && typeof err === "object" && (err as { retryable?: unknown }).retryable === true) return true;
    return this.retryableErrors.some((C) => err instanceof (C as unknown as new () => unknown));
  }
}
