/**
 * The official LangGraph.js conformance suite against CkptdSaver with retention keepLast: 20,
 * more checkpoints per thread than any test of the suite puts: everything passes as without it.
 * (With a smaller keepLast only the suite's history tests differ: see the report of the
 * LangGraph fidelity work, which lists them for keepLast: 1.)
 */
import { validate } from "@langchain/langgraph-checkpoint-validation";

import { sqliteInitializer } from "./conformance.js";

validate(sqliteInitializer("ckptd (retention keepLast 20)", { keepLast: 20 }));
