/**
 * Claims: hand a workflow over between workers safely (docs/protocol.md, "Claims").
 *
 * ```ts
 * await client.withClaim("wf-1", { owner: "worker-7", leaseSeconds: 30 }, async (claim) => {
 *   const wf = await client.workflow("wf-1", { claim });   // every save carries claim.fencingToken
 *   await wf.resume();
 *   ...
 * });
 * ```
 *
 * A {@link Claim} renews its lease in the background (an unref'd timer) while held and is released
 * with `release()` (`withClaim` does both). If the lease is lost meanwhile (another worker took the
 * workflow over after a renewal came too late, or no renewal got through before the lease ran
 * out), the daemon refuses the old token's saves ({@link ClaimedError}), `claim.signal` is aborted
 * and `check()` throws {@link ClaimLostError}; `withClaim` then rejects with it. The lease is
 * counted on the monotonic clock from when each claim or renewal was *sent*, never by comparing
 * `expiresAt` with the local clock: the database's clock decides.
 */
import { hostname } from "node:os";
import { performance } from "node:perf_hooks";

import type { CallOptions, Client } from "./client.js";
import { CLAIM_EXPIRED, ClaimedError, ClaimLostError, ClientClosedError, CkptdError, DaemonDiedError } from "./errors.js";
import type { ClaimResult } from "./types.js";

export interface ClaimOptions {
  /** Names this worker (default `host:pid`). */
  owner?: string;
  /** The lease, whole seconds 1-86400 (default 30). */
  leaseSeconds?: number;
  /** Milliseconds between renewals (default: a third of the lease). */
  renewEveryMs?: number;
}

/** Milliseconds between renewal attempts after one failed for another reason than the claim. */
const RETRY_MS = 500;

/** `host:pid`: names this worker in `workflow/claim`. */
export function defaultOwner(): string {
  return `${hostname()}:${process.pid}`;
}

/** A held claim on a workflow. Make one with `client.claim(...)` or `client.withClaim(...)`. */
export class Claim {
  readonly workflowId: string;
  readonly owner: string;
  readonly leaseSeconds: number;
  readonly renewEveryMs: number;
  /** The claim's fencing token: the workflow helper sends it with every save. */
  fencingToken = 0;
  /** The end of the lease as the daemon last reported it (the database's clock; for people). */
  expiresAt = "";
  /** Renewals that succeeded. */
  renewals = 0;
  /** Set once the claim is lost: what `check()` throws. */
  lost: ClaimLostError | null = null;
  released = false;

  private readonly client: Client;
  private readonly controller = new AbortController();
  private deadline = 0; // performance.now(): the lease ends no later than this, as far as we know
  private timer: NodeJS.Timeout | undefined;
  private inflight: Promise<unknown> | null = null;
  private stopped = false;

  /** Use `client.claim(...)`. */
  constructor(client: Client, workflowId: string, options: ClaimOptions = {}) {
    const lease = options.leaseSeconds ?? 30;
    if (!Number.isSafeInteger(lease) || lease < 1) throw new RangeError(`claim: leaseSeconds must be an integer ≥ 1, got ${lease}`);
    const every = options.renewEveryMs ?? (lease * 1000) / 3;
    if (!(every > 0 && every < lease * 1000)) throw new RangeError(`claim: renewEveryMs must be between 0 and the lease, got ${every}`);
    this.client = client;
    this.workflowId = workflowId;
    this.owner = options.owner ?? defaultOwner();
    this.leaseSeconds = lease;
    this.renewEveryMs = every;
  }

  /** Aborted (reason: the {@link ClaimLostError}) when the claim is lost: pass it to long work. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Claimed, not released, and not known to be lost. */
  get held(): boolean {
    return this.fencingToken !== 0 && !this.released && this.lost === null;
  }

  /** Throws {@link ClaimLostError} if the claim was lost: call it between units of work. */
  check(): void {
    if (this.lost !== null) throw this.lost;
  }

  /** Claims the workflow and starts renewing (`client.claim` does this). */
  async acquire(options?: CallOptions): Promise<this> {
    if (this.fencingToken !== 0) throw new Error("claim: acquired already");
    const sent = performance.now();
    const r = await this.client.claimWorkflow({ workflowId: this.workflowId, owner: this.owner, leaseSeconds: this.leaseSeconds }, options);
    this.granted(r, sent);
    this.schedule(this.nextWait(false));
    return this;
  }

  /** Renews the lease now (the background timer does it every `renewEveryMs`). */
  renew(options?: CallOptions): Promise<ClaimResult> {
    const p = this.doRenew(options);
    this.inflight = p.catch(() => {});
    return p;
  }

  private async doRenew(options?: CallOptions): Promise<ClaimResult> {
    this.check();
    const sent = performance.now();
    let r: ClaimResult;
    try {
      r = await this.client.renewClaim({ workflowId: this.workflowId, fencingToken: this.fencingToken, leaseSeconds: this.leaseSeconds }, options);
    } catch (e) {
      if (e instanceof ClaimedError) throw this.lose(e);
      throw e;
    }
    this.granted(r, sent);
    this.renewals++;
    return r;
  }

  /** Stops renewing and releases the claim (unless it was lost); true if it was released now. */
  async release(options?: CallOptions): Promise<boolean> {
    await this.stop();
    if (this.released || this.fencingToken === 0 || this.lost !== null) return false;
    try {
      const r = await this.client.releaseClaim({ workflowId: this.workflowId, fencingToken: this.fencingToken }, options);
      this.released = true;
      return r.released;
    } catch (e) {
      if (e instanceof ClaimedError) throw this.lose(e);
      throw e;
    }
  }

  /** Marks the claim lost after the daemon refused a write made with its token (-32008). */
  noteRefusal(err: unknown): void {
    if (err instanceof ClaimedError && this.held) this.lose(err);
  }

  private granted(r: ClaimResult, sent: number): void {
    this.fencingToken = r.fencingToken;
    this.expiresAt = r.expiresAt;
    this.deadline = sent + this.leaseSeconds * 1000;
  }

  private lose(err: unknown): ClaimLostError {
    if (this.lost === null) {
      if (err instanceof ClaimedError) {
        this.lost = new ClaimLostError(err.code, `lost the claim on workflow ${JSON.stringify(this.workflowId)}: ${err.message}`, err.data, { cause: err });
      } else {
        const why = err instanceof Error ? err.message : String(err);
        this.lost = new ClaimLostError(
          CLAIM_EXPIRED,
          `lost the claim on workflow ${JSON.stringify(this.workflowId)}: the lease of ${this.leaseSeconds}s ran out without a renewal (${why})`,
          { workflowId: this.workflowId, owner: this.owner, expiresAt: this.expiresAt, reason: `no renewal before the lease ran out: ${why}` },
          { cause: err },
        );
      }
      this.controller.abort(this.lost);
      clearTimeout(this.timer);
    }
    return this.lost;
  }

  private nextWait(failed: boolean): number {
    const left = this.deadline - performance.now();
    return Math.max(0, Math.min(failed ? RETRY_MS : this.renewEveryMs, left));
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.renew();
      this.schedule(this.nextWait(false));
    } catch (e) {
      if (e instanceof ClaimLostError || this.stopped) return;
      if (e instanceof DaemonDiedError || e instanceof ClientClosedError || performance.now() >= this.deadline || !(e instanceof CkptdError)) {
        this.lose(e);
        return;
      }
      this.schedule(this.nextWait(true)); // storage busy, a timeout...: again until the lease ends
    }
  }

  private async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inflight;
  }
}
