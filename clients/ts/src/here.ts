/**
 * `require` resolving from this file, to find the platform package that carries the binary
 * (`@ckptd/<platform>-<arch>`). The CommonJS build (scripts/build.mjs) replaces this module with
 * one exporting CommonJS's own `require`, since `import.meta` exists only in ES modules.
 */
import { createRequire } from "node:module";

export const localRequire: NodeJS.Require = createRequire(import.meta.url);
