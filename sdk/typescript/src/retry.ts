/**
 * When a failed call is sent again, and after how long: decided here once, as data
 * (`Repeat`, `Backoff`, `RetryPolicy`), the same way as the Python SDK decides it.
 */

import { MemqAPIError } from "./errors.js";

/** Which failures a call may be sent again after, by what a second delivery would do.
 * - `idempotent`: a second delivery does what the first did (GET, PUT, DELETE, searches,
 *   and an add: the server makes the same conversation, or the same `Idempotency-Key`, the
 *   same job). Retried after a 429, a 502/503/504, a connection that failed, and a timeout or
 *   a dropped connection after the request may have reached the server.
 * - `if_refused`: a second delivery could do the thing twice (a new key, a batch, a replay).
 *   Retried only when the server surely did nothing: a 429, or a connection never made.
 * - `never`: the health probes, which report the moment. */
export type Repeat = "idempotent" | "if_refused" | "never";

/** What one try gave: the server's status (and `Retry-After`), or a failure to reach it.
 * `sent` is false when the request surely never left (connection refused, name not found). */
export type Outcome =
  | { kind: "answer"; status: number; retryAfterS: number | null }
  | { kind: "failure"; sent: boolean };

const REFUSED_STATUSES = new Set([429]);
const UNAVAILABLE_STATUSES = new Set([502, 503, 504]);

/** Whether a call of kind `repeat` may be sent again after `outcome`. */
export function worthRepeating(outcome: Outcome, repeat: Repeat): boolean {
  if (repeat === "never") return false;
  if (outcome.kind === "answer") {
    if (REFUSED_STATUSES.has(outcome.status)) return true;
    return repeat === "idempotent" && UNAVAILABLE_STATUSES.has(outcome.status);
  }
  return !outcome.sent || repeat === "idempotent";
}

/** The waits between tries. Without `Retry-After`, retry n (from 0) waits
 * `min(firstS * 2**n, maxS)` times a random factor in [0.5, 1], so clients that failed
 * together do not come back together. A `Retry-After` up to `retryAfterMaxS` is waited as the
 * server gave it; a longer one ends the retries at once (the error carries it). */
export interface Backoff {
  firstS: number;
  maxS: number;
  retryAfterMaxS: number;
}

export const DEFAULT_BACKOFF: Readonly<Backoff> = Object.freeze({
  firstS: 0.5,
  maxS: 8,
  retryAfterMaxS: 60,
});

export const DEFAULT_MAX_RETRIES = 2;

/** How often a failed call is sent again and after how long. `maxRetries: 0` sends every
 * call once. */
export class RetryPolicy {
  readonly maxRetries: number;
  readonly backoff: Readonly<Backoff>;

  constructor(maxRetries: number = DEFAULT_MAX_RETRIES, backoff: Partial<Backoff> = {}) {
    if (!Number.isInteger(maxRetries) || maxRetries < 0) {
      throw configurationError(`maxRetries=${maxRetries}: expected an integer, 0 or more`);
    }
    const full = { ...DEFAULT_BACKOFF, ...backoff };
    if (Math.min(full.firstS, full.maxS, full.retryAfterMaxS) < 0) {
      throw configurationError(`backoff ${JSON.stringify(full)}: waits cannot be negative`);
    }
    this.maxRetries = maxRetries;
    this.backoff = Object.freeze(full);
  }

  /** Seconds to wait before sending the call again after `outcome`, or `null`: the outcome
   * is final (a success, a failure not worth repeating, retries spent, or a `Retry-After`
   * beyond the cap). */
  delayS(
    outcome: Outcome,
    repeat: Repeat,
    retriesDone: number,
    jitter = Math.random(),
  ): number | null {
    if (retriesDone >= this.maxRetries || !worthRepeating(outcome, repeat)) return null;
    const retryAfterS = outcome.kind === "answer" ? outcome.retryAfterS : null;
    if (retryAfterS === null) {
      const { firstS, maxS } = this.backoff;
      return Math.min(firstS * 2 ** Math.min(retriesDone, 32), maxS) * (0.5 + jitter / 2);
    }
    return retryAfterS <= this.backoff.retryAfterMaxS ? retryAfterS : null;
  }
}

/** A `configuration` error: raised when a client is built, not at its first call. */
export function configurationError(message: string): MemqAPIError {
  return new MemqAPIError({ status: null, type: "configuration", message });
}
