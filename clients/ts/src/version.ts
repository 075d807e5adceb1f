/** The protocol version this client knows, and the once-per-version warning for newer daemons. */

/** The newest `protocolVersion` this client knows (docs/protocol.md). */
export const PROTOCOL_VERSION = 1;

const warned = new Set<number>();

/**
 * Emits a process warning (`CkptdProtocolWarning`, once per protocol version) when `initialize`
 * reports a protocol version newer than this client knows: what the client knows still works,
 * newer features may not be reachable from it.
 */
export function checkProtocolVersion(result: { protocolVersion?: unknown; serverVersion?: unknown } | undefined): void {
  const v = result?.protocolVersion;
  if (typeof v !== "number" || !Number.isInteger(v) || v <= PROTOCOL_VERSION || warned.has(v)) return;
  warned.add(v);
  process.emitWarning(
    `ckptd ${String(result?.serverVersion ?? "?")} speaks protocol version ${v}; this client knows version ` +
      `${PROTOCOL_VERSION}. It keeps working; upgrade the ckptd npm package to use what is new.`,
    { type: "CkptdProtocolWarning", code: "CKPTD_PROTOCOL_NEWER" },
  );
}
