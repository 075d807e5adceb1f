// vitest runs only the LangGraph checkpointer conformance suite
// (@langchain/langgraph-checkpoint-validation, library mode); the client's own tests run under
// `node --test` (see package.json). Needs CKPTD_PATH and a build (dist/).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    globals: true, // validate() uses describe/it/expect as globals
    include: ["test/langgraph/*.conformance.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Every checkpointer gets its own ckptd process and database; two files (spec + delta
    // history) run in parallel.
    pool: "forks",
  },
});
