/**
 * Claims: the claim helper renews in the background, fences the workflow helper's saves, and a
 * worker that loses its lease rejects with -32008's data and stores nothing more. The suite runs
 * on SQLite and on PostgreSQL (a fresh schema of the run's throwaway cluster, CKPTD_TEST_PG_URL:
 * skipped without one, a failure under CI=true), where the workers of a fleet on several hosts
 * hand workflows over.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";

import { ClaimedError, ClaimLostError, Client, InvalidParamsError } from "ckptd";

import { Env } from "./support/e2e.js";
import { buildDir, ckptdPath, pgSchemaURL, sleep } from "./support/helpers.js";

/** The backends the suite runs on: db names a fresh database (a file of dir, or a PostgreSQL schema). */
const backends: { name: string; db: (dir: string) => string }[] = [{ name: "sqlite", db: (dir) => join(dir, "ckptd.db") }];
if ((process.env["CKPTD_TEST_PG_URL"] ?? "") !== "") {
  backends.push({ name: "postgres", db: () => pgSchemaURL()! });
} else {
  const why = "CKPTD_TEST_PG_URL is not set: the PostgreSQL run needs the throwaway cluster ./scripts/test.sh starts";
  describe("claims (postgres)", () => {
    if (process.env["CI"] === "true") {
      it("needs PostgreSQL under CI=true", () => {
        throw new Error(why);
      });
    } else {
      it.skip(`PostgreSQL tests skipped: ${why}`, () => {});
    }
  });
}

for (const backend of backends) {
  describe(`claims (${backend.name})`, () => {
    let env: Env;
    before(() => {
      env = new Env(backend.db);
    });
    after(async () => {
      await env?.cleanup();
    });

    it("withClaim renews in the background: a 1 s claim stays held for 3.5 s, then is released", async () => {
      const a = await env.start({ args: ["--keep-last", "0"] });
      const rival = await env.start();
      let steps = 0;
      let claimSeen: { renewals: number; released: boolean } | undefined;
      await a.withClaim("wf-renew", { owner: "worker-a", leaseSeconds: 1 }, async (claim) => {
        assert.equal(claim.fencingToken, 1);
        assert.ok(claim.held);
        const wf = await a.workflow<number>("wf-renew", { claim, initialState: 0, signals: [] });
        const deadline = performance.now() + 3500;
        while (performance.now() < deadline) {
          await wf.step(`s${steps}`, steps, (s) => {
            s.state = steps;
          });
          const before = Date.parse(claim.expiresAt);
          const e = await rival.claimWorkflow({ workflowId: "wf-renew", owner: "worker-b", leaseSeconds: 10 }).then(
            () => assert.fail("claimed a held workflow"),
            (err: unknown) => err,
          );
          assert.ok(e instanceof ClaimedError && !(e instanceof ClaimLostError));
          assert.equal(e.code, -32008);
          assert.equal(e.owner, "worker-a");
          // the lease the rival was shown: the one held then, which a background renewal may
          // have moved on meanwhile (never back)
          const shown = Date.parse(String(e.expiresAt));
          assert.ok(shown >= before && shown <= Date.parse(claim.expiresAt), `${e.expiresAt} not in [${before}, ${claim.expiresAt}]`);
          // a write without the token is refused while the claim is live
          await assert.rejects(rival.save({ workflowId: "wf-renew", state: { by: "rival" } }), ClaimedError);
          steps++;
          await sleep(250);
        }
        claimSeen = claim;
      });
      assert.ok(claimSeen !== undefined && claimSeen.renewals >= 6, `renewals: ${claimSeen?.renewals}`);
      assert.ok(claimSeen.released);
      const r = await rival.claimWorkflow({ workflowId: "wf-renew", owner: "worker-b", leaseSeconds: 10 });
      assert.equal(r.fencingToken, 2, "released: claimed again under a higher token");
      const stored = (await a.list({ workflowId: "wf-renew", limit: 1000 })).checkpoints;
      assert.equal(stored.length, 2 * steps);
    });

    it("a claim held by another worker is refused, naming it", async () => {
      const a = await env.start();
      const b = await env.start();
      const held = await a.claim("wf-held", { leaseSeconds: 30 });
      assert.match(held.owner, /:\d+$/, "host:pid by default");
      await assert.rejects(b.withClaim("wf-held", { owner: "b" }, () => assert.fail("ran without the claim")), (e: unknown) => {
        assert.ok(e instanceof ClaimedError);
        assert.equal(e.owner, held.owner);
        assert.equal(e.workflowId, "wf-held");
        assert.match(e.reason ?? "", /claimed by/);
        return true;
      });
      await b.save({ workflowId: "wf-free", state: 1 });
      const free = (await b.workflows({ claimable: true })).workflows.map((w) => w.workflowId);
      assert.ok(free.includes("wf-free") && !free.includes("wf-held"));
      await assert.rejects(a.workflow("wf-other", { claim: held }), /the claim is on workflow "wf-held"/);
      assert.equal(await held.release(), true);
    });

    it("a paused worker loses its lease: its next step rejects with -32008's data and stores nothing", async () => {
      const script = join(buildDir(), "test", "fixtures", "claim_worker.js");
      const child = spawn(process.execPath, [script, env.db, "wf-paused", "2"], {
        env: { ...process.env, CKPTD_PATH: ckptdPath() },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let err = "";
      child.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const lines = createInterface({ input: child.stdout });
      const next = async (): Promise<string> => String((await once(lines, "line"))[0]);
      try {
        const ready = await next();
        assert.match(ready, /^READY \d+$/, err);
        const token = Number(ready.split(" ")[1]);
        child.kill("SIGSTOP"); // a worker paused (GC, swap, a laptop lid...)
        const b = await env.start();
        let took;
        for (const deadline = Date.now() + 20_000; ; ) {
          try {
            took = await b.claimWorkflow({ workflowId: "wf-paused", owner: "worker-b", leaseSeconds: 30 });
            break;
          } catch (e) {
            assert.ok(e instanceof ClaimedError && e.owner === "child-worker", String(e));
            assert.ok(Date.now() < deadline, "the paused worker's lease never ran out");
            await sleep(200);
          }
        }
        assert.ok(took.fencingToken > token);
        child.kill("SIGCONT");
        child.stdin.write("go\n");
        const out = JSON.parse(await next()) as { error: string; code: number; data: { owner: string; workflowId: string } };
        assert.ok(out.error === "ClaimedError" || out.error === "ClaimLostError", JSON.stringify(out));
        assert.equal(out.code, -32008);
        assert.equal(out.data.owner, "worker-b");
        assert.equal(out.data.workflowId, "wf-paused");
        const [code] = (await once(child, "exit")) as [number | null];
        assert.equal(code, 0, err);
        const stored = (await b.list({ workflowId: "wf-paused" })).checkpoints.map((c) => [c.step, c.phase]);
        assert.deepEqual(stored.sort(), [[0, "before_step"], [0, "completed"]], "nothing of step 1 is stored");
      } finally {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGCONT");
          child.kill("SIGKILL");
        }
      }
    });

    it("a claim whose renewals stopped is lost once another worker takes over", async () => {
      const a = await env.start();
      const b = await env.start();
      const claim = await a.claim("wf-lost", { owner: "a", leaseSeconds: 1 });
      (claim as unknown as { stop(): Promise<void> }).stop(); // renewals stop: as if this worker hung
      await sleep(1100);
      await b.claimWorkflow({ workflowId: "wf-lost", owner: "b", leaseSeconds: 30 });
      await assert.rejects(claim.renew(), (e: unknown) => e instanceof ClaimLostError && e.code === -32008 && e.owner === "b");
      assert.ok(claim.signal.aborted && claim.signal.reason === claim.lost);
      assert.throws(() => claim.check(), ClaimLostError);
      const wf = await a.workflow("wf-lost", { claim, signals: [] });
      await assert.rejects(wf.step("x", 0, () => {}), ClaimLostError);
      assert.equal(await claim.release(), false, "lost: nothing to release");
    });

    it("resumes against the same tree checked out elsewhere (sourcesRoot)", async () => {
      const c = await env.start();
      const here = join(env.dir, "host-a");
      const there = join(env.dir, "host-b");
      for (const d of [here, there]) {
        mkdirSync(join(d, "pkg"), { recursive: true });
        writeFileSync(join(d, "pkg", "agent.ts"), "export const v = 1;\n");
      }
      const wf = await c.workflow<number>("wf-moved", { sources: { root: here }, signals: [] });
      await wf.step("one", 0, (s) => {
        s.state = 1;
      });
      writeFileSync(join(here, "pkg", "agent.ts"), "export const v = 2; // drifted here only\n");
      const moved = await c.workflow<number>("wf-moved", { sourcesRoot: there, signals: [] });
      const plan = await moved.resume();
      assert.ok(plan !== null);
      assert.equal(plan.startStep, 1);
      const drift = plan["drift"] as unknown as { drifted: boolean; root: string; recordedRoot: string };
      assert.deepEqual([drift.drifted, drift.root, drift.recordedRoot], [false, there, here]);
      const st = await c.driftStatus({ workflowId: "wf-moved", sourcesRoot: there });
      assert.equal(st.drifted, false);
      assert.equal(st.recordedRoot, here);
      await assert.rejects(c.driftStatus({ workflowId: "wf-moved", sourcesRoot: join(env.dir, "missing") }), (e: unknown) => {
        assert.ok(e instanceof InvalidParamsError);
        assert.equal(e.field, "sourcesRoot");
        return true;
      });
    });

    it("Client is exported for claims without `await using` (Node 20)", () => {
      assert.equal(typeof Client.prototype.withClaim, "function");
    });
  });
}
