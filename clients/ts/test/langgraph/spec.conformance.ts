/** The official LangGraph.js checkpointer conformance suite, run against CkptdSaver as "ckptd". */
import { validate } from "@langchain/langgraph-checkpoint-validation";

import { initializer } from "./conformance.js";

validate(initializer);
