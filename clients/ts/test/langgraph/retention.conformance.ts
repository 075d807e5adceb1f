/**
 * The official LangGraph.js conformance suite against CkptdSaver with retention (issue #24):
 * keepLast: 20, more checkpoints per thread than any test of the suite puts, and keepLast: 1, the
 * smallest there is. Both pass every test, the opt-in getDeltaChannelHistory tests included, as
 * without retention: the suite puts at most two checkpoints per thread and namespace, the second
 * naming the first as its parent, and a put's parent is never removed (nor what a delta-channel
 * replay of a kept checkpoint needs). So no test of this suite differs with retention; the
 * Python suite's history tests do with keep_last=1 (clients/python/tests/test_langgraph_conformance.py,
 * bench/results/2026-11-27-lg-retention-conformance.md).
 */
import { deltaChannelHistoryTests, validate } from "@langchain/langgraph-checkpoint-validation";

import { sqliteInitializer } from "./conformance.js";

validate(sqliteInitializer("ckptd (retention keepLast 20)", { keepLast: 20 }));
validate(sqliteInitializer("ckptd (retention keepLast 1)", { keepLast: 1 }));
deltaChannelHistoryTests(sqliteInitializer("ckptd (retention keepLast 1)", { keepLast: 1 }));
