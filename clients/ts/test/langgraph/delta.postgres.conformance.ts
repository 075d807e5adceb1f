/** The getDeltaChannelHistory conformance tests (delta.conformance.ts) on PostgreSQL. */
import { deltaChannelHistoryTests } from "@langchain/langgraph-checkpoint-validation";

import { pgInitializer, pgMissing } from "./conformance.js";

if (pgInitializer !== undefined) {
  deltaChannelHistoryTests(pgInitializer);
} else {
  pgMissing("delta channel history");
}
