/**
 * `Symbol.asyncDispose` for runtimes that lack it. Node ≥ 20.4 defines it; older builds get the
 * same registered symbol Node itself uses (`Symbol.for("nodejs.asyncDispose")`), so `await using`
 * (compiled by TypeScript) and Node's own disposables agree. This is the standard polyfill and the
 * only global the package touches.
 */
const S = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
S.asyncDispose ??= Symbol.for("nodejs.asyncDispose");
S.dispose ??= Symbol.for("nodejs.dispose");

/** The `Symbol.asyncDispose` in effect (after the polyfill). */
export const asyncDispose: typeof Symbol.asyncDispose = Symbol.asyncDispose;
