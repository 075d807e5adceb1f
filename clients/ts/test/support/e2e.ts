/** Shared setup for end-to-end tests against the real ckptd binary (CKPTD_PATH). */
import { join } from "node:path";

import { Client, type ClientOptions } from "ckptd";

import { ckptdPath, tempDir } from "./helpers.js";

/**
 * A temporary database directory and a way to start clients on it; db, if given, picks the
 * database from that directory (default: ckptd.db in it; a postgres:// URL also works).
 */
export class Env {
  readonly dir: string;
  readonly db: string;
  readonly binary: string;
  private readonly clients: Client[] = [];
  private readonly cleanupDir: () => void;

  constructor(db?: (dir: string) => string) {
    this.binary = ckptdPath();
    const t = tempDir("ckptd-ts-e2e-");
    this.dir = t.dir;
    this.db = db ? db(t.dir) : join(t.dir, "ckptd.db");
    this.cleanupDir = t.cleanup;
  }

  async start(options: ClientOptions = {}): Promise<Client> {
    const c = await Client.start({ db: this.db, binary: this.binary, ...options });
    this.clients.push(c);
    return c;
  }

  async cleanup(): Promise<void> {
    await Promise.all(this.clients.map((c) => c.close()));
    this.cleanupDir();
  }
}
