/**
 * CkptdSaver under real LangGraph.js graphs (@langchain/langgraph, a dev dependency): resume in a
 * new process, time travel / forks, interrupts, subgraph namespaces, LangChain messages through
 * serde, and DeltaChannel (getDeltaChannelHistory). Needs CKPTD_PATH.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { AIMessage, HumanMessage, type BaseMessage } from "@langchain/core/messages";
import {
  Annotation,
  Command,
  DeltaChannel,
  END,
  MessagesAnnotation,
  START,
  StateGraph,
  interrupt,
  messagesDeltaReducer,
} from "@langchain/langgraph";
import { CkptdSaver } from "ckptd/langgraph";

import { ckptdPath, tempDir } from "./support/helpers.js";

const State = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  count: Annotation<number>({ reducer: (a, b) => a + b, default: () => 0 }),
  last: Annotation<string>,
});

/** a → b → (count < limit ? a : END) */
function counterGraph(limit: number) {
  return new StateGraph(State)
    .addNode("a", () => ({ log: ["a"], count: 1, last: "a" }))
    .addNode("b", () => ({ log: ["b"], last: "b" }))
    .addEdge(START, "a")
    .addEdge("a", "b")
    .addConditionalEdges("b", (s) => (s.count < limit ? "a" : END));
}

describe("CkptdSaver with LangGraph graphs", () => {
  let dir: string;
  let cleanup: () => void;
  const savers: CkptdSaver[] = [];
  const saver = (db = "graph.db") => {
    const s = new CkptdSaver({ db: join(dir, db), binary: ckptdPath() });
    savers.push(s);
    return s;
  };
  before(() => {
    ({ dir, cleanup } = tempDir("ckptd-lg-graph-"));
  });
  after(async () => {
    await Promise.all(savers.map((s) => s.close()));
    cleanup();
  });

  it("runs a loop, keeps history, and continues the thread from a new daemon", async () => {
    const config = { configurable: { thread_id: "loop" } };
    const s1 = saver("loop.db");
    const g1 = counterGraph(3).compile({ checkpointer: s1 });
    const out = await g1.invoke({ log: ["start"] }, config);
    assert.deepEqual(out.log, ["start", "a", "b", "a", "b", "a", "b"]);
    assert.equal(out.count, 3);
    const history = [];
    for await (const snap of g1.getStateHistory(config)) history.push(snap);
    assert.equal(history.length, 8); // input + 7 steps
    assert.equal(history[0]!.values.count, 3);
    await s1.close();

    // A new process on the same database continues the thread.
    const g2 = counterGraph(5).compile({ checkpointer: saver("loop.db") });
    assert.deepEqual((await g2.getState(config)).values.log, out.log);
    const out2 = await g2.invoke({ log: ["again"] }, config);
    assert.equal(out2.count, 5);
    assert.deepEqual(out2.log.slice(0, 8), [...out.log, "again"]);
  });

  it("time travel: a fork from an old checkpoint does not disturb the original branch", async () => {
    const config = { configurable: { thread_id: "fork" } };
    const g = counterGraph(3).compile({ checkpointer: saver() });
    const final = await g.invoke({ log: ["start"] }, config);
    const history = [];
    for await (const snap of g.getStateHistory(config)) history.push(snap);
    const afterFirstA = history.find((h) => h.values.count === 1 && h.values.last === "a")!;
    // Fork: change the state at that checkpoint, then run on from there.
    const forkConfig = await g.updateState(afterFirstA.config, { log: ["forked"], count: 10 });
    const forked = await g.invoke(null, forkConfig);
    assert.deepEqual(forked.log, ["start", "a", "forked", "b"]);
    assert.equal(forked.count, 11);
    // The original branch's checkpoints still read back their own values.
    const original = await g.getState(history[0]!.config);
    assert.deepEqual(original.values, final);
    const again = await g.getState(afterFirstA.config);
    assert.deepEqual(again.values.log, ["start", "a"]);
    assert.equal(again.values.count, 1);
  });

  it("interrupts and resumes with Command across daemons", async () => {
    const Ask = Annotation.Root({ answer: Annotation<string>, asked: Annotation<number>({ reducer: (a, b) => a + b, default: () => 0 }) });
    const build = () =>
      new StateGraph(Ask)
        .addNode("ask", () => ({ answer: interrupt("name?") as string, asked: 1 }))
        .addEdge(START, "ask")
        .addEdge("ask", END);
    const config = { configurable: { thread_id: "hitl" } };
    const s1 = saver("hitl.db");
    const r1 = await build().compile({ checkpointer: s1 }).invoke({}, config);
    assert.deepEqual(
      (r1 as { __interrupt__?: { value: unknown }[] }).__interrupt__?.map((i) => i.value),
      ["name?"],
    );
    await s1.close();
    const r2 = await build()
      .compile({ checkpointer: saver("hitl.db") })
      .invoke(new Command({ resume: "Ada" }), config);
    assert.equal(r2.answer, "Ada");
    assert.equal(r2.asked, 1);
  });

  it("stores subgraph checkpoints in their own namespaces", async () => {
    const sub = counterGraph(1).compile();
    const parent = new StateGraph(State)
      .addNode("outer", () => ({ log: ["outer"] }))
      .addNode("sub", sub)
      .addEdge(START, "outer")
      .addEdge("outer", "sub")
      .addEdge("sub", END);
    const s = saver();
    const g = parent.compile({ checkpointer: s });
    const config = { configurable: { thread_id: "sub" } };
    const out = await g.invoke({ log: [] }, config);
    assert.deepEqual(out.log, ["outer", "outer", "a", "b"]);
    const namespaces = new Set<string>();
    for await (const t of s.list({ configurable: { thread_id: "sub" } })) namespaces.add(t.config.configurable!["checkpoint_ns"] as string);
    assert.ok(namespaces.has(""));
    assert.ok([...namespaces].some((ns) => ns.startsWith("sub:")), [...namespaces].join(", "));
    const state = await g.getState(config, { subgraphs: true });
    assert.deepEqual(state.values.log, out.log);
  });

  it("round-trips LangChain messages (serde's slow path) and DeltaChannel state", async () => {
    const config = { configurable: { thread_id: "msgs" } };
    const chat = new StateGraph(MessagesAnnotation)
      .addNode("bot", (s) => ({ messages: [new AIMessage(`echo ${s.messages.length}`)] }))
      .addEdge(START, "bot")
      .addEdge("bot", END);
    const s1 = saver("msgs.db");
    await chat.compile({ checkpointer: s1 }).invoke({ messages: [new HumanMessage("hi")] }, config);
    await chat.compile({ checkpointer: s1 }).invoke({ messages: [new HumanMessage("again")] }, config);
    await s1.close();
    const state = await chat.compile({ checkpointer: saver("msgs.db") }).getState(config);
    const msgs = state.values.messages as BaseMessage[];
    assert.deepEqual(
      msgs.map((m) => [m.constructor.name, m.content]),
      [
        ["HumanMessage", "hi"],
        ["AIMessage", "echo 1"],
        ["HumanMessage", "again"],
        ["AIMessage", "echo 3"],
      ],
    );

    // DeltaChannel: only some checkpoints hold the value; reads replay writes
    // (getDeltaChannelHistory -> lg/channelHistory).
    const DeltaState = Annotation.Root({
      messages: new DeltaChannel(messagesDeltaReducer, { snapshotFrequency: 3 }) as unknown as ReturnType<typeof Annotation<BaseMessage[]>>,
    });
    const delta = new StateGraph(DeltaState)
      .addNode("bot", (s: { messages: BaseMessage[] }) => ({ messages: [new AIMessage(`n=${s.messages.length}`)] }))
      .addEdge(START, "bot")
      .addEdge("bot", END);
    const dconfig = { configurable: { thread_id: "delta" } };
    const s2 = saver("delta.db");
    for (let i = 0; i < 5; i++) await delta.compile({ checkpointer: s2 }).invoke({ messages: [new HumanMessage(`q${i}`)] }, dconfig);
    await s2.close();
    const dstate = await delta.compile({ checkpointer: saver("delta.db") }).getState(dconfig);
    const contents = (dstate.values.messages as BaseMessage[]).map((m) => m.content);
    assert.deepEqual(contents, ["q0", "n=1", "q1", "n=3", "q2", "n=5", "q3", "n=7", "q4", "n=9"]);
  });
});
