/**
 * `workflow/list` page by page (Client.workflows).
 */
import type { WorkflowInfo, WorkflowListParams, WorkflowListResult } from "./types.js";

/**
 * The workflows of a `workflow/list` listing. `for await (const wf of listing)` asks the daemon
 * for one page at a time (`limit` per page, default 1000), so a database of any size costs the
 * memory of one page; `pages()` yields the pages themselves.
 *
 * Awaited, it answers what `workflows()` answered before paging: `{ workflows }` holding every
 * workflow (it follows the cursors). Given `limit` or `cursor`, it answers that one page as
 * `workflow/list` does, with `cursor` when more follow.
 */
export class WorkflowListing implements Promise<WorkflowListResult>, AsyncIterable<WorkflowInfo> {
  readonly [Symbol.toStringTag] = "WorkflowListing";
  readonly #fetch: (params: WorkflowListParams) => Promise<WorkflowListResult>;
  readonly #params: WorkflowListParams;
  #result: Promise<WorkflowListResult> | undefined;

  constructor(fetch: (params: WorkflowListParams) => Promise<WorkflowListResult>, params: WorkflowListParams) {
    this.#fetch = fetch;
    this.#params = { ...params };
  }

  /** The pages, from the given `cursor` (or the first) to the last. */
  async *pages(): AsyncGenerator<WorkflowListResult, void, undefined> {
    let cursor = this.#params.cursor;
    for (;;) {
      const params: WorkflowListParams = { ...this.#params };
      delete params.cursor;
      if (cursor !== undefined) params.cursor = cursor;
      const page = await this.#fetch(params);
      yield page;
      if (typeof page.cursor !== "string" || page.cursor === "") return;
      cursor = page.cursor;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<WorkflowInfo, void, undefined> {
    for await (const page of this.pages()) yield* page.workflows;
  }

  then<A = WorkflowListResult, B = never>(
    onfulfilled?: ((value: WorkflowListResult) => A | PromiseLike<A>) | null,
    onrejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    return this.#answer().then(onfulfilled, onrejected);
  }

  catch<B = never>(onrejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<WorkflowListResult | B> {
    return this.#answer().catch(onrejected);
  }

  finally(onfinally?: (() => void) | null): Promise<WorkflowListResult> {
    return this.#answer().finally(onfinally);
  }

  #answer(): Promise<WorkflowListResult> {
    this.#result ??= (async () => {
      if (this.#params.limit !== undefined || this.#params.cursor !== undefined) return this.#fetch({ ...this.#params });
      const workflows: WorkflowInfo[] = [];
      for await (const page of this.pages()) workflows.push(...page.workflows);
      return { workflows };
    })();
    return this.#result;
  }
}
