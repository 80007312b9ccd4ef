/**
 * One error tree for every failed call. `MemqAPIError` is the base; the status decides the
 * subclass (`AuthenticationError` 401/403, `NotFoundError` 404, `ValidationError`
 * 400/413/422, `RateLimitError` 429, `UnavailableError` 502/503/504 and transport failures),
 * and `MemqTimeoutError` is `waitFor` giving up. `errorFromResponse` and `errorFromFailure`
 * are the only places a response or a thrown fetch error becomes one of them.
 */

import type { Job } from "./types.js";

/** What `MemqAPIError` is built from. */
export interface ErrorInit {
  status: number | null;
  type: string;
  message: string;
  field?: string | null;
  retryAfterS?: number | null;
  requestId?: string | null;
  cause?: unknown;
}

/** A failed call. `status` is the HTTP status (`null` when no answer came back); `type`,
 * `message` and `field` come from the API's error body when it sent one; `retryAfterS` is the
 * server's `Retry-After` in seconds (`null` when it sent none); `requestId` the
 * `X-Request-ID` of the request, to find it in the server's logs. */
export class MemqAPIError extends Error {
  readonly status: number | null;
  readonly type: string;
  readonly field: string | null;
  readonly retryAfterS: number | null;
  readonly requestId: string | null;
  /** The API's own message (without the status and type that `message` starts with). */
  readonly detail: string;

  constructor(init: ErrorInit) {
    const where = init.field ? ` (field ${init.field})` : "";
    const prefix = init.status !== null ? `${init.status} ` : "";
    super(`${prefix}${init.type}: ${init.message}${where}`, { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status;
    this.type = init.type;
    this.field = init.field ?? null;
    this.retryAfterS = init.retryAfterS ?? null;
    this.requestId = init.requestId ?? null;
    this.detail = init.message;
  }
}

/** 401: no valid key; 403: a valid key without the right (e.g. an admin route). */
export class AuthenticationError extends MemqAPIError {}

/** 404: no such memory, job or batch in the caller's tenant. */
export class NotFoundError extends MemqAPIError {}

/** 400, 413, 422: refused as sent; `field` names the culprit when known. Sending it again
 * unchanged fails again. */
export class ValidationError extends MemqAPIError {}

/** 429: over a per-tenant limit; nothing was done. `retryAfterS` says when the server will
 * take the call again. */
export class RateLimitError extends MemqAPIError {}

/** The service could not answer now (502/503/504, connection refused, timeout): transient.
 * `status` is `null` for transport failures (`type` is `timeout` or `transport`). */
export class UnavailableError extends MemqAPIError {}

/** `waitFor` gave up: the job was still not finished. `job` is the last state seen. */
export class MemqTimeoutError extends MemqAPIError {
  readonly job: Job | null;

  constructor(message: string, job: Job | null) {
    super({ status: null, type: "timeout", message });
    this.job = job;
  }
}

const ERROR_BY_STATUS: Record<number, typeof MemqAPIError> = {
  400: ValidationError,
  401: AuthenticationError,
  403: AuthenticationError,
  404: NotFoundError,
  413: ValidationError,
  422: ValidationError,
  429: RateLimitError,
  502: UnavailableError,
  503: UnavailableError,
  504: UnavailableError,
};

/** The error for an answer that is not a usable 2xx, from its status, headers and body text. */
export function errorFromResponse(
  response: Response,
  text: string,
  requestId: string,
): MemqAPIError {
  const { type, message, field } = errorBody(text, response.statusText);
  const cls = ERROR_BY_STATUS[response.status] ?? MemqAPIError;
  return new cls({
    status: response.status,
    type,
    message,
    field,
    retryAfterS: parseRetryAfter(response.headers.get("Retry-After")),
    requestId: response.headers.get("X-Request-ID") ?? requestId,
  });
}

/** The error for what `fetch` (or reading the answer) threw: our own timeout, or the network. */
export function errorFromFailure(failure: unknown, requestId: string): MemqAPIError {
  const init = { status: null, requestId, cause: failure };
  if (failure instanceof TimeoutSignal) {
    return new UnavailableError({ ...init, type: "timeout", message: failure.message });
  }
  return new UnavailableError({ ...init, type: "transport", message: describe(failure) });
}

/** The reason the SDK aborts a try that ran out of time (told apart from the caller's abort). */
export class TimeoutSignal extends Error {
  constructor(timeoutS: number) {
    super(`no answer within ${timeoutS}s`);
    this.name = "TimeoutSignal";
  }
}

/** A thrown value as one line: its message and, for fetch's "fetch failed", the cause's. */
export function describe(failure: unknown): string {
  if (!(failure instanceof Error)) return String(failure);
  const cause = failure.cause instanceof Error ? `: ${failure.cause.message}` : "";
  return `${failure.name}: ${failure.message}${cause}`;
}

/** (type, message, field) from memq's error envelope; the raw text when there is none. */
function errorBody(
  text: string,
  statusText: string,
): { type: string; message: string; field: string | null } {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const error = isObject(body) ? body.error : undefined;
  if (isObject(error) && typeof error.message === "string") {
    const field = typeof error.field === "string" && error.field ? error.field : null;
    return { type: String(error.type ?? "http"), message: error.message, field };
  }
  return { type: "http", message: text.slice(0, 500) || statusText, field: null };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const DELTA_SECONDS = /^\d+(\.\d+)?$/;

/** Seconds from a `Retry-After` header: delta-seconds (`"5"`; a decimal is read too) or an
 * HTTP-date (the seconds from `nowMs` until then, 0 once it is past). `null` when the header
 * is absent or unreadable. */
export function parseRetryAfter(value: string | null, nowMs: number = Date.now()): number | null {
  const trimmed = value?.trim();
  if (!trimmed) return null;
  if (DELTA_SECONDS.test(trimmed)) return Number(trimmed);
  const whenMs = Date.parse(trimmed);
  if (Number.isNaN(whenMs)) return null;
  return Math.max((whenMs - nowMs) / 1000, 0);
}
