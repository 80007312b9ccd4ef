/**
 * `MemqClient`: memq's own HTTP API (`/v1/...`) from TypeScript, over the global `fetch`
 * (Node 18+, Deno, Bun, browsers), with no runtime dependencies.
 *
 * Request fields keep the API's snake_case names (their types come from the generated
 * OpenAPI schema); the SDK's own options are camelCase. Answers are the API's JSON, typed.
 * A failed call throws a `MemqAPIError` subclass; a 429, a 502/503/504 and a failed
 * connection are retried (`maxRetries`, 2 by default) as `RetryPolicy` decides.
 */

import {
  MemqAPIError,
  MemqTimeoutError,
  TimeoutSignal,
  errorFromFailure,
  errorFromResponse,
  parseRetryAfter,
} from "./errors.js";
import {
  type Backoff,
  type Outcome,
  type Repeat,
  RetryPolicy,
  configurationError,
} from "./retry.js";
import {
  type Ack,
  type AddParams,
  type Batch,
  type BatchAccepted,
  type BatchItem,
  type BatchSearchResults,
  type Deleted,
  type Erased,
  type Health,
  type HistoryEntry,
  type Job,
  type JobAccepted,
  type JobPage,
  type JobQuery,
  type KeyCreated,
  type ListParams,
  type Memory,
  type MemoryDetail,
  type MemoryPage,
  type MemoryUpdate,
  type Messages,
  type Readiness,
  type SearchParams,
  type SearchRequest,
  type SearchResults,
  TERMINAL_STATUSES,
} from "./types.js";

export const VERSION = "0.1.0";
export const DEFAULT_BASE_URL = "http://127.0.0.1:8000";
export const DEFAULT_TIMEOUT_S = 30;
/** The SDK's environment variables (the same as the Python SDK's; the server ignores them). */
export const ENV = {
  baseUrl: "MEMQ_CLIENT_URL",
  apiKey: "MEMQ_CLIENT_API_KEY",
  timeoutS: "MEMQ_CLIENT_TIMEOUT_S",
  maxRetries: "MEMQ_CLIENT_MAX_RETRIES",
} as const;

const SERVER_WAIT_MAX_S = 300; // the API refuses a longer wait_s
// fetch's causes when the request surely never left: no connection was made.
const NOT_SENT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** How to reach the API. Each option defaults to its `MEMQ_CLIENT_*` environment variable
 * (where there is a `process.env`), then to the default. */
export interface ClientOptions {
  /** `MEMQ_CLIENT_URL`, else `http://127.0.0.1:8000`. */
  baseUrl?: string;
  /** `MEMQ_CLIENT_API_KEY`; required. */
  apiKey?: string;
  /** Bounds each try of a call, reading the answer included: `MEMQ_CLIENT_TIMEOUT_S`, else 30. */
  timeoutS?: number;
  /** Times a failed call is sent again: `MEMQ_CLIENT_MAX_RETRIES`, else 2; 0 never. */
  maxRetries?: number;
  /** The waits between tries (`DEFAULT_BACKOFF` for what is not given). */
  backoff?: Partial<Backoff>;
  /** Another `fetch` (a proxy agent, a test double); the global one by default. */
  fetch?: typeof fetch;
  /** Headers sent with every call. */
  headers?: Record<string, string>;
}

/** Per-call options, the last argument of every method. */
export interface RequestOptions {
  /** Aborts the call, its retries and waits included (a `MemqAPIError` of type `aborted`). */
  signal?: AbortSignal;
  /** The `X-Request-ID` to send (default: a new id per call, kept across its retries). */
  requestId?: string;
}

/** `get`'s options: the request's, and whether to include the memory's provenance. */
export interface GetOptions extends RequestOptions {
  includeSources?: boolean;
}

/** One HTTP request, before any client sends it. */
interface Call {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: Record<string, unknown>;
  body?: unknown;
  headers?: Record<string, string>;
  /** Default: a POST only if refused, anything else as idempotent. */
  repeat?: Repeat;
}

interface Settings {
  baseUrl: string;
  apiKey: string;
  timeoutS: number;
  retry: RetryPolicy;
  fetch: typeof fetch;
  headers: Record<string, string>;
}

/** memq's HTTP API. `new MemqClient({ apiKey })`, or `new MemqClient()` with
 * `MEMQ_CLIENT_API_KEY` (and `MEMQ_CLIENT_URL`) set. */
export class MemqClient {
  readonly baseUrl: string;
  readonly timeoutS: number;
  readonly retryPolicy: RetryPolicy;
  readonly #settings: Settings;

  constructor(options: ClientOptions = {}) {
    this.#settings = settingsFrom(options);
    this.baseUrl = this.#settings.baseUrl;
    this.timeoutS = this.#settings.timeoutS;
    this.retryPolicy = this.#settings.retry;
  }

  /** How many times a failed call is sent again. */
  get maxRetries(): number {
    return this.retryPolicy.maxRetries;
  }

  /** This client with other retry or timeout settings, for one call or one part of a program
   * (`client.withOptions({ maxRetries: 0 }).search(...)`); the key and URL are kept. */
  withOptions(options: Pick<ClientOptions, "maxRetries" | "backoff" | "timeoutS">): MemqClient {
    return new MemqClient({
      ...this.#settings,
      timeoutS: options.timeoutS ?? this.timeoutS,
      maxRetries: options.maxRetries ?? this.maxRetries,
      backoff: { ...this.retryPolicy.backoff, ...options.backoff },
    });
  }

  // -- jobs ---------------------------------------------------------------------------------

  /** Queue a conversation (`POST /v1/memories`): a `JobAccepted`, or with `wait: true` the
   * finished `Job` (whatever its status; a `MemqTimeoutError` after `wait_timeout_s`, 60 by
   * default). At least one of `user_id`, `agent_id`, `run_id`. The same conversation, or the
   * same `idempotency_key`, always answers with the same job, so an add is retried like a read. */
  add(
    messages: Messages,
    params: AddParams & { wait: true },
    options?: RequestOptions,
  ): Promise<Job>;
  add(
    messages: Messages,
    params: AddParams & { wait?: false },
    options?: RequestOptions,
  ): Promise<JobAccepted>;
  add(messages: Messages, params: AddParams, options?: RequestOptions): Promise<JobAccepted | Job>;
  async add(
    messages: Messages,
    params: AddParams,
    options: RequestOptions = {},
  ): Promise<JobAccepted | Job> {
    const {
      wait = false,
      wait_timeout_s: waitTimeoutS = 60,
      idempotency_key: key,
      ...body
    } = params;
    const deadlineMs = Date.now() + waitTimeoutS * 1000;
    const serverWaitS = wait ? Math.min(waitTimeoutS, this.timeoutS / 2, SERVER_WAIT_MAX_S) : 0;
    const call: Call = {
      method: "POST",
      path: "/v1/memories",
      query: serverWaitS >= 0.1 ? { wait: true, wait_s: serverWaitS } : {},
      body: { infer: true, ...body, messages },
      headers: key ? { "Idempotency-Key": key } : {},
      repeat: "idempotent",
    };
    const answer = await this.#send<JobAccepted | Job>(call, options);
    if (!wait || isFinishedJob(answer)) return answer;
    const timeoutS = Math.max((deadlineMs - Date.now()) / 1000, 0);
    return this.waitFor(answer.job_id, { timeoutS }, options);
  }

  /** The job (`GET /v1/jobs/{id}`): status, phase, counts (with LLM tokens), timings,
   * results, errors. */
  job(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.#send({ method: "GET", path: `/v1/jobs/${segment(jobId)}` }, options);
  }

  /** Poll the job until it is succeeded, failed or dead and return it (a failed job is
   * returned, not thrown: read `status`); a `MemqTimeoutError` after `timeoutS` (60). */
  async waitFor(
    job: string | { job_id: string },
    { timeoutS = 60, pollS = 0.2 }: { timeoutS?: number; pollS?: number } = {},
    options: RequestOptions = {},
  ): Promise<Job> {
    const jobId = typeof job === "string" ? job : job.job_id;
    const deadlineMs = Date.now() + timeoutS * 1000;
    for (;;) {
      const seen = await this.job(jobId, options);
      const remainingMs = deadlineMs - Date.now();
      if (TERMINAL_STATUSES.has(seen.status)) return seen;
      if (remainingMs <= 0) {
        throw new MemqTimeoutError(`job ${jobId} still ${seen.status} after ${timeoutS}s`, seen);
      }
      await sleep(Math.min(pollS * 1000, remainingMs), options.signal);
    }
  }

  /** Replay a failed or dead job from its recorded request; returns the job. */
  retry(jobId: string, options?: RequestOptions): Promise<Job> {
    return this.#send({ method: "POST", path: `/v1/jobs/${segment(jobId)}/retry` }, options);
  }

  /** One page of the tenant's jobs, newest first (`GET /v1/jobs`); pass the page's
   * `next_cursor` with the same filters for the next one. */
  jobsPage(
    query: JobQuery & { limit?: number; cursor?: string | null } = {},
    options?: RequestOptions,
  ): Promise<JobPage> {
    const { status, since, until, ...rest } = query;
    const statuses = Array.isArray(status) ? status.join(",") : status;
    const params = { ...rest, status: statuses, since: iso(since), until: iso(until) };
    return this.#send({ method: "GET", path: "/v1/jobs", query: params }, options);
  }

  /** Every job matching the filters, newest first: `for await (const job of client.jobs(...))`
   * (pages of `limit` fetched as it is consumed), or walk `.pages()`. */
  jobs(query: JobQuery & { limit?: number } = {}, options?: RequestOptions): Pager<Job, JobPage> {
    return new Pager((cursor) => this.jobsPage({ ...query, cursor }, options));
  }

  /** Queue many conversations (`POST /v1/batches`), each item an add's body; a bad item
   * queues nothing. */
  addBatch(items: BatchItem[], options?: RequestOptions): Promise<BatchAccepted> {
    return this.#send({ method: "POST", path: "/v1/batches", body: { items } }, options);
  }

  /** Counts of the batch's jobs per status. */
  batch(batchId: string, options?: RequestOptions): Promise<Batch> {
    return this.#send({ method: "GET", path: `/v1/batches/${segment(batchId)}` }, options);
  }

  // -- memories -----------------------------------------------------------------------------

  /** Hybrid search in a scope (at least one id); `results` best first. Memories a newer one
   * replaced are left out unless `include_replaced`; `as_of` answers with what was true then. */
  search(query: string, params: SearchParams, options?: RequestOptions): Promise<SearchResults> {
    const call: Call = {
      method: "POST",
      path: "/v1/memories/search",
      body: { ...params, query },
      repeat: "idempotent",
    };
    return this.#send(call, options);
  }

  /** Several searches, answered in order, each with its own `partial` flag. */
  searchMany(queries: SearchRequest[], options?: RequestOptions): Promise<BatchSearchResults> {
    const call: Call = {
      method: "POST",
      path: "/v1/memories/search/batch",
      body: { queries },
      repeat: "idempotent",
    };
    return this.#send(call, options);
  }

  /** One memory; a `NotFoundError` when it does not exist (or was deleted). With
   * `includeSources`, its `provenance`: the messages it came from and the job that wrote it. */
  get(memoryId: string, options: GetOptions = {}): Promise<MemoryDetail> {
    const { includeSources, ...request } = options;
    const query = includeSources ? { include: "sources" } : undefined;
    return this.#send({ method: "GET", path: `/v1/memories/${segment(memoryId)}`, query }, request);
  }

  /** One page of the scope's memories, oldest first (`GET /v1/memories`); pass the page's
   * `next_cursor` for the next one. */
  page(
    params: ListParams & { cursor?: string | null },
    options?: RequestOptions,
  ): Promise<MemoryPage> {
    const { filters, ...rest } = params;
    const query = { ...rest, filters: filters == null ? undefined : JSON.stringify(filters) };
    return this.#send({ method: "GET", path: "/v1/memories", query }, options);
  }

  /** Every memory of the scope, oldest first: `for await (const memory of client.getAll(...))`
   * (pages fetched as it is consumed), or walk `.pages()`. */
  getAll(params: ListParams, options?: RequestOptions): Pager<Memory, MemoryPage> {
    return new Pager((cursor) => this.page({ ...params, cursor }, options));
  }

  /** New text (re-embedded) and/or metadata; returns the updated memory. */
  update(memoryId: string, fields: MemoryUpdate, options?: RequestOptions): Promise<Memory> {
    const call: Call = { method: "PUT", path: `/v1/memories/${segment(memoryId)}`, body: fields };
    return this.#send(call, options);
  }

  /** Delete one memory (its history keeps a DELETE row). A delete sent again because its
   * answer was lost throws `NotFoundError` when the first had done it. */
  delete(memoryId: string, options?: RequestOptions): Promise<Ack> {
    return this.#send({ method: "DELETE", path: `/v1/memories/${segment(memoryId)}` }, options);
  }

  /** Delete every memory of a scope (at least one id); `deleted` is the count. History rows
   * stay (`eraseUser` removes everything). */
  deleteAll(
    scope: { user_id?: string; agent_id?: string; run_id?: string },
    options?: RequestOptions,
  ): Promise<Deleted> {
    return this.#send({ method: "DELETE", path: "/v1/memories", query: scope }, options);
  }

  /** ADD, UPDATE and DELETE events of a memory, oldest first. */
  history(memoryId: string, options?: RequestOptions): Promise<HistoryEntry[]> {
    return this.#send(
      { method: "GET", path: `/v1/memories/${segment(memoryId)}/history` },
      options,
    );
  }

  /** Forget a user completely in the caller's tenant (`DELETE /v1/users/{id}`): memories,
   * history text, messages, entities, jobs. Safe to repeat; `in_flight` lists the user's jobs
   * still running then (call again once they have ended). */
  eraseUser(userId: string, options?: RequestOptions): Promise<Erased> {
    return this.#send({ method: "DELETE", path: `/v1/users/${segment(userId)}` }, options);
  }

  // -- admin and health ---------------------------------------------------------------------

  /** A new API key for `tenant` (needs an admin key): `id`, `tenant`, `key`. */
  createKey(
    tenant: string,
    { name = "", admin = false } = {},
    options?: RequestOptions,
  ): Promise<KeyCreated> {
    const call: Call = { method: "POST", path: "/v1/admin/keys", body: { tenant, name, admin } };
    return this.#send(call, options);
  }

  /** Revoke a key by its id (needs an admin key). */
  revokeKey(keyId: string, options?: RequestOptions): Promise<Ack> {
    return this.#send({ method: "DELETE", path: `/v1/admin/keys/${segment(keyId)}` }, options);
  }

  /** The API process is up: `status` is `ok`. */
  healthz(options?: RequestOptions): Promise<Health> {
    return this.#send({ method: "GET", path: "/healthz", repeat: "never" }, options);
  }

  /** Elasticsearch and Redis reachable; an `UnavailableError` when one is not. */
  readyz(options?: RequestOptions): Promise<Readiness> {
    return this.#send({ method: "GET", path: "/readyz", repeat: "never" }, options);
  }

  // -- sending ------------------------------------------------------------------------------

  /** `call`'s decoded answer, tried again as the retry policy says. */
  async #send<T>(call: Call, options: RequestOptions = {}): Promise<T> {
    const requestId = options.requestId ?? newRequestId();
    const repeat = call.repeat ?? (call.method === "POST" ? "if_refused" : "idempotent");
    for (let retriesDone = 0; ; retriesDone++) {
      const result = await this.#try(call, requestId, options.signal);
      const delayS = this.retryPolicy.delayS(result.outcome, repeat, retriesDone);
      if (delayS === null) {
        if (result.error) throw result.error;
        return result.value as T;
      }
      await sleep(delayS * 1000, options.signal);
    }
  }

  /** One try: the decoded 2xx answer, or the error, with the outcome the retry policy reads. */
  async #try(call: Call, requestId: string, signal?: AbortSignal): Promise<Tried> {
    const { fetch: fetchImpl, timeoutS } = this.#settings;
    const timer = timeoutController(timeoutS, signal);
    try {
      const response = await fetchImpl(this.#url(call), this.#init(call, requestId, timer.signal));
      const text = await response.text();
      const retryAfterS = parseRetryAfter(response.headers.get("Retry-After"));
      const outcome: Outcome = { kind: "answer", status: response.status, retryAfterS };
      if (!response.ok) return { outcome, error: errorFromResponse(response, text, requestId) };
      return { outcome, ...decode(text, response, requestId) };
    } catch (failure) {
      if (signal?.aborted) throw abortedError(signal, requestId); // the caller's: never retried
      const sent = !NOT_SENT_CODES.has(causeCode(failure));
      return { outcome: { kind: "failure", sent }, error: errorFromFailure(failure, requestId) };
    } finally {
      timer.clear();
    }
  }

  #url(call: Call): string {
    const url = new URL(call.path, this.baseUrl);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  #init(call: Call, requestId: string, signal: AbortSignal): RequestInit {
    const headers: Record<string, string> = {
      ...this.#settings.headers,
      Authorization: `Bearer ${this.#settings.apiKey}`,
      "X-Request-ID": requestId,
      ...call.headers,
    };
    if (call.body === undefined) return { method: call.method, headers, signal };
    headers["Content-Type"] = "application/json";
    return { method: call.method, headers, signal, body: JSON.stringify(call.body) };
  }
}

/** What one try gave the loop of `#send`. */
interface Tried {
  outcome: Outcome;
  value?: unknown;
  error?: MemqAPIError;
}

/** The JSON of a 2xx answer, or an `invalid_response` error. */
function decode(
  text: string,
  response: Response,
  requestId: string,
): { value?: unknown; error?: MemqAPIError } {
  try {
    return { value: JSON.parse(text) };
  } catch (failure) {
    const message = `expected JSON, got ${JSON.stringify(text.slice(0, 200))}`;
    const error = new MemqAPIError({
      status: response.status,
      type: "invalid_response",
      message,
      requestId,
      cause: failure,
    });
    return { error };
  }
}

// -- paging -----------------------------------------------------------------------------------

/** Every item of a listing, fetched page by page as it is consumed: `for await` over it for
 * the items, or over `pages()` for the pages. Each iteration starts again from the first page. */
export class Pager<
  T,
  P extends { results: T[]; next_cursor?: string | null },
> implements AsyncIterable<T> {
  readonly #fetch: (cursor: string | null) => Promise<P>;

  constructor(fetchPage: (cursor: string | null) => Promise<P>) {
    this.#fetch = fetchPage;
  }

  /** The pages in order, until one has no `next_cursor` (or no results). */
  async *pages(): AsyncGenerator<P, void, undefined> {
    let cursor: string | null = null;
    for (;;) {
      const page: P = await this.#fetch(cursor);
      yield page;
      cursor = page.next_cursor ?? null;
      if (!cursor || page.results.length === 0) return;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for await (const page of this.pages()) yield* page.results;
  }

  /** Every item in one array (reads every page first). */
  async toArray(): Promise<T[]> {
    const items: T[] = [];
    for await (const item of this) items.push(item);
    return items;
  }
}

// -- helpers ----------------------------------------------------------------------------------

function settingsFrom(options: ClientOptions): Settings {
  const apiKey = options.apiKey ?? env(ENV.apiKey);
  if (!apiKey) throw configurationError(`no API key: pass apiKey or set ${ENV.apiKey}`);
  const baseUrl = options.baseUrl ?? env(ENV.baseUrl) ?? DEFAULT_BASE_URL;
  try {
    new URL(baseUrl);
  } catch {
    throw configurationError(`baseUrl ${JSON.stringify(baseUrl)} is not a URL`);
  }
  const timeoutS = options.timeoutS ?? numberFromEnv(ENV.timeoutS, DEFAULT_TIMEOUT_S);
  if (!(timeoutS > 0)) throw configurationError(`timeoutS=${timeoutS}: expected seconds, > 0`);
  const maxRetries = options.maxRetries ?? numberFromEnv(ENV.maxRetries, undefined);
  const fetchImpl = options.fetch ?? globalThis.fetch;
  if (typeof fetchImpl !== "function")
    throw configurationError("no global fetch: pass fetch (Node 18+ has one)");
  return {
    baseUrl,
    apiKey,
    timeoutS,
    retry: new RetryPolicy(maxRetries, options.backoff),
    fetch: fetchImpl,
    headers: { "User-Agent": `memq-typescript/${VERSION}`, ...options.headers },
  };
}

function env(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } })
    .process;
  return process?.env?.[name] || undefined;
}

function numberFromEnv<D extends number | undefined>(name: string, fallback: D): number | D {
  const raw = env(name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (raw.trim() === "" || Number.isNaN(value))
    throw configurationError(`${name}=${JSON.stringify(raw)}: expected a number`);
  return value;
}

function isFinishedJob(answer: JobAccepted | Job): answer is Job {
  return !("created" in answer) && "attempts" in answer && TERMINAL_STATUSES.has(answer.status);
}

/** A path segment, escaped so an id can never change the route. */
function segment(value: string): string {
  return encodeURIComponent(value);
}

function iso(value: Date | string | null | undefined): string | null | undefined {
  return value instanceof Date ? value.toISOString() : value;
}

function newRequestId(): string {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (crypto?.randomUUID) return crypto.randomUUID().replaceAll("-", "");
  return Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16)).join("");
}

function causeCode(failure: unknown): string {
  const cause = failure instanceof Error ? failure.cause : undefined;
  const code =
    typeof cause === "object" && cause !== null ? (cause as { code?: unknown }).code : undefined;
  return typeof code === "string" ? code : "";
}

/** A signal that aborts after `timeoutS` (with a `TimeoutSignal`) or when `outer` does. */
function timeoutController(
  timeoutS: number,
  outer?: AbortSignal,
): { signal: AbortSignal; clear: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new TimeoutSignal(timeoutS)), timeoutS * 1000);
  const onAbort = (): void => controller.abort(outer?.reason);
  if (outer?.aborted) onAbort();
  outer?.addEventListener("abort", onAbort, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
    },
  };
}

/** Wait `ms`, or less when `signal` aborts (then reject with its reason as an `aborted` error). */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortedError(signal));
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(abortedError(signal as AbortSignal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function abortedError(signal: AbortSignal, requestId?: string): MemqAPIError {
  const message = "the call was aborted";
  return new MemqAPIError({
    status: null,
    type: "aborted",
    message,
    requestId,
    cause: signal.reason,
  });
}
