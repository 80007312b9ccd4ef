/**
 * The shapes the API sends and takes, named for readers. Every one is read from the generated
 * `schema.ts` by path and component name (never by operation id), so regenerating it after an
 * API change keeps these names stable.
 */

import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];

/** The JSON body a route takes. */
type JsonBody<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  requestBody?: { content: { "application/json": infer B } };
}
  ? B
  : never;

/** The query parameters a route takes. */
type QueryOf<P extends keyof paths, M extends keyof paths[P]> = paths[P][M] extends {
  parameters: { query?: infer Q };
}
  ? NonNullable<Q>
  : never;

/** A memory: its text (`memory`), scope ids, metadata, times, validity and provenance. */
export type Memory = Schemas["MemoryView"];
/** A memory read by id: with `provenance` when asked for (`get(id, { includeSources: true })`). */
export type MemoryDetail = Schemas["MemoryDetail"];
/** Where a memory came from: its source messages and the job that wrote it (`known` is false
 * for a memory stored before memq recorded sources; `missing` counts sources since erased). */
export type Provenance = Schemas["Provenance"];
/** A message a memory came from, as it was given to memq. */
export type SourceMessage = Schemas["SourceMessage"];
/** A search hit: a memory with its fused `score` and, when asked, `explain`. */
export type SearchHit = Schemas["SearchHit"];
/** A search's answer: hits best first; `partial` when a shard did not answer. */
export type SearchResults = Schemas["SearchResults"];
/** A batch search's answer: one list of hits per query, in order. */
export type BatchSearchResults = Schemas["BatchSearchResults"];
/** One page of a scope's memories, oldest first; `next_cursor` fetches the next. */
export type MemoryPage = Schemas["MemoryPage"];
/** One ADD, UPDATE, DELETE (or ERASE) event of a memory. */
export type HistoryEntry = Schemas["HistoryEntry"];
/** A job: `status`, `phase`, `counts` (with LLM tokens), `timings_ms`, `results`, `errors`. */
export type Job = Schemas["JobPublic"];
/** An add's immediate answer: the job's id and where to follow it. */
export type JobAccepted = Schemas["JobAccepted"];
/** One page of the tenant's jobs, newest first. */
export type JobPage = Schemas["JobPage"];
/** A batch's jobs counted per status. */
export type Batch = Schemas["BatchPublic"];
/** A batch's immediate answer: its id and each item's job. */
export type BatchAccepted = Schemas["BatchAccepted"];
/** A new API key; `key` is shown this once. */
export type KeyCreated = Schemas["KeyCreated"];
/** How many memories a scope delete removed. */
export type Deleted = Schemas["Deleted"];
/** An acknowledgement. */
export type Ack = Schemas["Message"];
/** The process is up. */
export type Health = Schemas["Health"];
/** Elasticsearch and Redis reachable. */
export type Readiness = Schemas["Readiness"];
/** The API's error envelope: `error.type`, `error.message`, `error.field`. */
export type ErrorResponse = Schemas["ErrorResponse"];

/** What erasing a user removed, counted per place, and the user's jobs still running then
 * (call `eraseUser` again once they have ended). */
export type Erased = Schemas["UserErased"];

/** A job's status; `succeeded`, `failed` and `dead` are final. */
export type JobStatus = "queued" | "running" | "succeeded" | "failed" | "dead";

/** The statuses a job ends in (it will not change by itself afterwards). */
export const TERMINAL_STATUSES: ReadonlySet<string> = new Set(["succeeded", "failed", "dead"]);

/** Messages as `add` takes them: a string, one message object, or a list of them. */
export type Messages = JsonBody<"/v1/memories", "post">["messages"];

/** The request body of an add, less its messages (snake_case, as the API names them). */
export type AddBody = Omit<JsonBody<"/v1/memories", "post">, "messages">;

/** `add`'s parameters: the body's fields, then the SDK's own: `wait` for the finished job
 * (up to `wait_timeout_s`, 60 by default), and `idempotency_key` (the `Idempotency-Key`
 * header: the same key always answers with the same job). */
export interface AddParams extends AddBody {
  wait?: boolean;
  wait_timeout_s?: number;
  idempotency_key?: string;
}

/** `search`'s parameters: the search body less the query. */
export type SearchParams = Omit<JsonBody<"/v1/memories/search", "post">, "query">;

/** One query of `searchMany`: a whole search body. */
export type SearchRequest = JsonBody<"/v1/memories/search", "post">;

/** A filter object (eq, ne, gt, in, contains..., AND / OR / NOT). */
export type Filters = Record<string, unknown>;

/** `page`'s and `getAll`'s parameters: the scope, `filters` as an object, `page_size`, and
 * the other query parameters of `GET /v1/memories`. */
export type ListParams = Omit<QueryOf<"/v1/memories", "get">, "filters" | "cursor"> & {
  filters?: Filters | null;
};

/** The filters of a job listing: one or several statuses, the scope's ids, `batch_id`, and
 * `since` (inclusive) / `until` (exclusive) on the time the job was accepted. */
export type JobQuery = Omit<
  QueryOf<"/v1/jobs", "get">,
  "status" | "since" | "until" | "limit" | "cursor"
> & {
  status?: JobStatus | JobStatus[] | null;
  since?: Date | string | null;
  until?: Date | string | null;
};

/** `update`'s fields: new text (re-embedded) and/or metadata. */
export type MemoryUpdate = JsonBody<"/v1/memories/{memory_id}", "put">;

/** One item of `addBatch`: an add's body, messages included. */
export type BatchItem = JsonBody<"/v1/memories", "post">;

/** `createKey`'s body. */
export type KeyCreate = JsonBody<"/v1/admin/keys", "post">;
