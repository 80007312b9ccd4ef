/**
 * Retries, timeouts and error translation against a real local HTTP server that answers as
 * each test scripts it (429 then 200, 503, silence, a closed port...): `MemqClient` goes
 * through the real `fetch` and sockets, as it does against memq.
 */

import assert from "node:assert/strict";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  MemqAPIError,
  MemqClient,
  RateLimitError,
  UnavailableError,
  ValidationError,
  parseRetryAfter,
} from "../src/index.js";

/** One scripted answer: status, headers, body; `hang` never answers. */
interface Answer {
  status?: number;
  headers?: Record<string, string>;
  body?: unknown;
  hang?: boolean;
}

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

let server: Server;
let baseUrl: string;
let script: Answer[] = [];
let seen: Seen[] = [];
const hanging: ServerResponse[] = [];

before(async () => {
  server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString()));
    request.on("end", () => {
      seen.push({
        method: request.method ?? "",
        url: request.url ?? "",
        headers: request.headers,
        body,
      });
      answer(
        response,
        script.shift() ?? {
          status: 500,
          body: { error: { type: "script", message: "no answer left" } },
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  for (const response of hanging) response.destroy();
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  script = [];
  seen = [];
});

function answer(
  response: ServerResponse,
  { status = 200, headers = {}, body = {}, hang = false }: Answer,
): void {
  if (hang) {
    hanging.push(response);
    return;
  }
  const text = typeof body === "string" ? body : JSON.stringify(body);
  response.writeHead(status, { "Content-Type": "application/json", ...headers });
  response.end(text);
}

function client(options: ConstructorParameters<typeof MemqClient>[0] = {}): MemqClient {
  return new MemqClient({
    baseUrl,
    apiKey: "mq_test",
    backoff: { firstS: 0.01, maxS: 0.05 },
    ...options,
  });
}

const LIMITED = { type: "rate_limited", message: "over 5 requests per second" };
const MEMORY = { id: "m1", memory: "likes tea", metadata: {} };

describe("429", () => {
  test("is retried after Retry-After, with the same X-Request-ID, then answers", async () => {
    script = [
      { status: 429, headers: { "Retry-After": "1" }, body: { error: LIMITED } },
      { body: MEMORY },
    ];
    const started = Date.now();
    const memory = await client().get("m1");
    assert.equal(memory.memory, "likes tea");
    assert.ok(Date.now() - started >= 950, "waited the server's Retry-After");
    assert.equal(seen.length, 2);
    const ids = seen.map((request) => request.headers["x-request-id"]);
    assert.ok(ids[0]);
    assert.equal(ids[0], ids[1]);
    assert.equal(seen[0]?.headers.authorization, "Bearer mq_test");
  });

  test("with no retries left is a RateLimitError carrying retryAfterS and the message", async () => {
    script = [
      {
        status: 429,
        headers: { "Retry-After": "3", "X-Request-ID": "server-id" },
        body: { error: LIMITED },
      },
    ];
    await assert.rejects(
      client({ maxRetries: 0 }).search("tea", { user_id: "u" }),
      (error: unknown) => {
        assert.ok(error instanceof RateLimitError);
        assert.equal(error.status, 429);
        assert.equal(error.retryAfterS, 3);
        assert.equal(error.type, "rate_limited");
        assert.equal(error.detail, "over 5 requests per second");
        assert.equal(error.requestId, "server-id");
        return true;
      },
    );
    assert.equal(seen.length, 1);
  });

  test("with a Retry-After beyond the cap is thrown at once", async () => {
    script = [{ status: 429, headers: { "Retry-After": "120" }, body: { error: LIMITED } }];
    await assert.rejects(
      client().get("m1"),
      (error: unknown) => error instanceof RateLimitError && error.retryAfterS === 120,
    );
    assert.equal(seen.length, 1);
  });

  test("is retried even for a call that may not be repeated otherwise (a POST)", async () => {
    script = [
      { status: 429, headers: { "Retry-After": "0" }, body: { error: LIMITED } },
      { body: { batch_id: "b", status_url: "", jobs: [] } },
    ];
    const accepted = await client().addBatch([{ messages: "hi", user_id: "u", infer: false }]);
    assert.equal(accepted.batch_id, "b");
    assert.equal(seen.length, 2);
  });

  test("Retry-After as an HTTP date is read too", () => {
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(parseRetryAfter("Thu, 01 Jan 2026 00:00:05 GMT", now), 5);
    assert.equal(parseRetryAfter("Wed, 31 Dec 2025 23:59:00 GMT", now), 0);
    assert.equal(parseRetryAfter("1.5", now), 1.5);
    assert.equal(parseRetryAfter("soon", now), null);
    assert.equal(parseRetryAfter(null, now), null);
  });
});

describe("5xx and the network", () => {
  test("a 503 on a read is retried with backoff, up to maxRetries", async () => {
    const down = {
      status: 503,
      body: { error: { type: "unavailable", message: "Elasticsearch is down" } },
    };
    script = [down, down, { body: MEMORY }];
    assert.equal((await client({ maxRetries: 2 }).get("m1")).id, "m1");
    assert.equal(seen.length, 3);

    script = [down, down, down];
    seen = [];
    await assert.rejects(client({ maxRetries: 2 }).get("m1"), (error: unknown) => {
      assert.ok(error instanceof UnavailableError);
      assert.equal(error.status, 503);
      assert.equal(error.detail, "Elasticsearch is down");
      return true;
    });
    assert.equal(seen.length, 3);
  });

  test("a 503 on a POST that could act twice is not retried", async () => {
    script = [{ status: 503, body: { error: { type: "unavailable", message: "try later" } } }];
    await assert.rejects(client().retry("job-1"), UnavailableError);
    assert.equal(seen.length, 1);
  });

  test("an add is retried after a 503 (the same conversation is the same job)", async () => {
    script = [
      { status: 503, body: "bad gateway" },
      { status: 202, body: { job_id: "j", status: "queued", status_url: "", created: true } },
    ];
    const accepted = await client().add(
      "hi",
      { user_id: "u", infer: false },
      { requestId: "mine" },
    );
    assert.equal(accepted.job_id, "j");
    assert.deepEqual(
      seen.map((request) => request.headers["x-request-id"]),
      ["mine", "mine"],
    );
    assert.deepEqual(JSON.parse(seen[1]?.body ?? ""), {
      infer: false,
      user_id: "u",
      messages: "hi",
    });
  });

  test("a closed port is retried, then an UnavailableError of type transport", async () => {
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
    const port = (probe.address() as AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const started = Date.now();
    await assert.rejects(
      client({ baseUrl: `http://127.0.0.1:${port}`, maxRetries: 2 }).get("m1"),
      (error: unknown) => {
        assert.ok(error instanceof UnavailableError);
        assert.equal(error.status, null);
        assert.equal(error.type, "transport");
        assert.match(error.detail, /ECONNREFUSED/);
        return true;
      },
    );
    assert.ok(Date.now() - started < 2000);
  });

  test("a silent server times out each try: an UnavailableError of type timeout", async () => {
    script = [{ hang: true }, { hang: true }];
    await assert.rejects(client({ timeoutS: 0.3, maxRetries: 1 }).get("m1"), (error: unknown) => {
      assert.ok(error instanceof UnavailableError);
      assert.equal(error.type, "timeout");
      return true;
    });
    assert.equal(seen.length, 2, "a read is sent again after a timeout");
  });

  test("a timed-out POST that could act twice is not sent again", async () => {
    script = [{ hang: true }];
    await assert.rejects(
      client({ timeoutS: 0.3 }).createKey("t"),
      (error: unknown) => error instanceof UnavailableError && error.type === "timeout",
    );
    assert.equal(seen.length, 1);
  });

  test("the caller's abort ends the call and its retries at once", async () => {
    const down = { status: 503, body: { error: { type: "unavailable", message: "down" } } };
    script = [down, down, down];
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const slow = client({ backoff: { firstS: 5, maxS: 5 } });
    const started = Date.now();
    await assert.rejects(
      slow.get("m1", { signal: controller.signal }),
      (error: unknown) => error instanceof MemqAPIError && error.type === "aborted",
    );
    assert.ok(Date.now() - started < 2000);
    assert.equal(seen.length, 1);
  });
});

describe("answers and configuration", () => {
  test("a body without memq's envelope becomes the message", async () => {
    script = [{ status: 422, body: "plain words" }];
    await assert.rejects(client().get("m1"), (error: unknown) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.type, "http");
      assert.equal(error.detail, "plain words");
      return true;
    });
  });

  test("a 2xx that is not JSON is an invalid_response", async () => {
    script = [{ status: 200, body: "<html>", headers: { "Content-Type": "text/html" } }];
    await assert.rejects(
      client().get("m1"),
      (error: unknown) => error instanceof MemqAPIError && error.type === "invalid_response",
    );
  });

  test("ids are escaped into one path segment, and queries carry filters as JSON", async () => {
    script = [{ body: MEMORY }, { body: { results: [], next_cursor: null } }];
    await client().get("../admin/keys");
    await client().page({ user_id: "u", filters: { city: "Lisbon" }, page_size: 10 });
    assert.equal(seen[0]?.url, "/v1/memories/..%2Fadmin%2Fkeys");
    const query = new URL(seen[1]?.url ?? "", baseUrl).searchParams;
    assert.equal(query.get("filters"), '{"city":"Lisbon"}');
    assert.equal(query.get("page_size"), "10");
  });

  test("a pager follows next_cursor until the last page", async () => {
    script = [
      { body: { results: [{ ...MEMORY, id: "a" }], next_cursor: "c1" } },
      { body: { results: [{ ...MEMORY, id: "b" }], next_cursor: null } },
    ];
    const ids = (await client().getAll({ user_id: "u" }).toArray()).map((memory) => memory.id);
    assert.deepEqual(ids, ["a", "b"]);
    assert.equal(new URL(seen[1]?.url ?? "", baseUrl).searchParams.get("cursor"), "c1");
  });

  test("no key, a bad URL or a negative retry count is a configuration error at construction", () => {
    const saved = process.env.MEMQ_CLIENT_API_KEY;
    delete process.env.MEMQ_CLIENT_API_KEY;
    try {
      assert.throws(
        () => new MemqClient({ baseUrl }),
        (error: unknown) => error instanceof MemqAPIError && error.type === "configuration",
      );
    } finally {
      if (saved !== undefined) process.env.MEMQ_CLIENT_API_KEY = saved;
    }
    assert.throws(() => client({ baseUrl: "not a url" }), /configuration/);
    assert.throws(() => client({ maxRetries: -1 }), /configuration/);
  });

  test("withOptions keeps the key and URL and changes the retries", async () => {
    script = [{ status: 503, body: "down" }];
    const once = client({ maxRetries: 5 }).withOptions({ maxRetries: 0 });
    assert.equal(once.maxRetries, 0);
    await assert.rejects(once.get("m1"), UnavailableError);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]?.headers.authorization, "Bearer mq_test");
  });
});
