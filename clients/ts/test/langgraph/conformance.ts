/**
 * Shared initializer for the LangGraph conformance suite
 * (@langchain/langgraph-checkpoint-validation): every `createCheckpointer()` starts a fresh ckptd
 * process on a fresh, empty database; `destroyCheckpointer()` closes it and removes the database.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import type { CheckpointSaverTestInitializer } from "@langchain/langgraph-checkpoint-validation";
import { CkptdSaver } from "ckptd/langgraph";

const dirs = new WeakMap<CkptdSaver, string>();

function binary(): string {
  const p = process.env["CKPTD_PATH"];
  if (p === undefined || p === "") {
    throw new Error("CKPTD_PATH is not set: the LangGraph conformance suite needs the ckptd binary (go build -o bin/ckptd ./cmd/ckptd)");
  }
  return p;
}

export const initializer: CheckpointSaverTestInitializer<CkptdSaver> & {
  createCheckpointer(saverClass?: typeof CkptdSaver): Promise<CkptdSaver>;
} = {
  checkpointerName: "ckptd",
  async createCheckpointer(saverClass: typeof CkptdSaver = CkptdSaver) {
    const dir = mkdtempSync(join(tmpdir(), "ckptd-lg-"));
    const saver = new saverClass({ db: join(dir, "ckptd.db"), binary: binary() });
    await saver.setup();
    dirs.set(saver, dir);
    return saver;
  },
  async destroyCheckpointer(saver) {
    await saver.close();
    const dir = dirs.get(saver);
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  },
};
