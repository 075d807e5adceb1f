/** The official LangGraph.js checkpointer conformance suite, against CkptdSaver on PostgreSQL as "ckptd (postgres)". */
import { validate } from "@langchain/langgraph-checkpoint-validation";

import { pgInitializer, pgMissing } from "./conformance.js";

if (pgInitializer !== undefined) {
  validate(pgInitializer);
} else {
  pgMissing("ckptd");
}
