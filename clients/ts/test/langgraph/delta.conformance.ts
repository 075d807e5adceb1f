/**
 * The opt-in getDeltaChannelHistory conformance tests (8 in validation 1.1.1), run twice: against
 * CkptdSaver's one-round-trip override (`lg/channelHistory`) as "ckptd", and against
 * BaseCheckpointSaver's default getTuple walk on the same storage as "ckptd (base walk)", which
 * checks that getTuple returns pending writes in writesSortKey order.
 */
import { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { deltaChannelHistoryTests } from "@langchain/langgraph-checkpoint-validation";
import { CkptdSaver } from "ckptd/langgraph";

import { initializer } from "./conformance.js";

deltaChannelHistoryTests(initializer);

class BaseWalkSaver extends CkptdSaver {
  override getDeltaChannelHistory(options: Parameters<CkptdSaver["getDeltaChannelHistory"]>[0]) {
    return BaseCheckpointSaver.prototype.getDeltaChannelHistory.call(this, options);
  }
}

deltaChannelHistoryTests<CkptdSaver>({
  ...initializer,
  checkpointerName: "ckptd (base walk)",
  createCheckpointer: () => initializer.createCheckpointer(BaseWalkSaver),
});
