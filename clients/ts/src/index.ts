/**
 * ckptd — TypeScript client for the ckptd checkpoint/resume sidecar.
 *
 * ```ts
 * import { Client } from "ckptd";
 * const client = await Client.start({ db: "./ckpt.db" });
 * try {
 *   const { checkpointId } = await client.save({ workflowId: "wf-1", step: 0, state: { n: 1 } });
 *   const cp = await client.load({ checkpointId });
 * } finally {
 *   await client.close();
 * }
 * ```
 */
import "./dispose.js";

export { Client, STDERR_TAIL_BYTES } from "./client.js";
export type { CallOptions, ClientEvents, ClientOptions, ExitInfo, NotificationsOptions, Reply } from "./client.js";
export { Workflow, StepInterruptedError, RollbackFailedError } from "./workflow.js";
export type { ErrorClass, LayerParams, RollbackHandler, RollbackOptions, RollbackOutcome, StepContext, StepOptions, WorkflowOptions } from "./workflow.js";
export { Claim, defaultOwner } from "./claim.js";
export { WorkflowListing } from "./listing.js";
export { DeltaMemory, computeDelta, deltaPays, valueDelta, DELTA_MIN_BYTES } from "./delta.js";
export type { StateDelta, ValueDelta } from "./delta.js";
export type { ClaimOptions } from "./claim.js";
export {
  BinaryNotFoundError,
  CheckpointCorruptError,
  CheckpointNotFoundError,
  CLAIM_EXPIRED,
  ClaimedError,
  ClaimLostError,
  CkptdError,
  CLIENT_CLOSED,
  ClientClosedError,
  ConflictError,
  DAEMON_DIED,
  DaemonDiedError,
  ErrorCode,
  InternalError,
  InvalidParamsError,
  MethodNotFoundError,
  ProtocolError,
  ResumeValidationError,
  ShuttingDownError,
  StorageUnavailableError,
  TooLargeError,
  errorFromRpc,
} from "./errors.js";
export type { ResumeProblem, RpcErrorObject } from "./errors.js";
export { findBinary, packagedBinary } from "./binary.js";
export type { FindBinaryOptions } from "./binary.js";
export { PROTOCOL_VERSION, checkProtocolVersion } from "./version.js";
export { FrameReader, FramingError, MAX_HEADER_BYTES, encodeFrame, parseBody } from "./framing.js";
export type { Frame, FrameReaderOptions, FramingErrorKind } from "./framing.js";
export type * from "./types.js";
