/** memq's TypeScript SDK: `MemqClient`, its errors, its retry policy and the API's types. */

export {
  DEFAULT_BASE_URL,
  DEFAULT_TIMEOUT_S,
  ENV,
  MemqClient,
  Pager,
  VERSION,
  type ClientOptions,
  type GetOptions,
  type RequestOptions,
} from "./client.js";
export {
  AuthenticationError,
  MemqAPIError,
  MemqTimeoutError,
  NotFoundError,
  RateLimitError,
  UnavailableError,
  ValidationError,
  parseRetryAfter,
  type ErrorInit,
} from "./errors.js";
export {
  DEFAULT_BACKOFF,
  DEFAULT_MAX_RETRIES,
  RetryPolicy,
  worthRepeating,
  type Backoff,
  type Outcome,
  type Repeat,
} from "./retry.js";
export * from "./types.js";
export type { components, paths } from "./schema.js";
