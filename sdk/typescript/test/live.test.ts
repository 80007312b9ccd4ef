/**
 * `MemqClient` against the live API (`MEMQ_URL`, default http://127.0.0.1:8000): a tenant of
 * its own (a key made with the stack's admin key, `MEMQ_API_ADMIN_KEY` or the file `ops/up`
 * keeps), raw adds (infer=false: no LLM needed), the memory's whole life, and the API's
 * refusals as typed errors. The user is erased and the key revoked at the end.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import {
  AuthenticationError,
  MemqAPIError,
  MemqClient,
  MemqTimeoutError,
  NotFoundError,
  ValidationError,
  type Job,
} from "../src/index.js";

const BASE_URL = process.env.MEMQ_URL ?? "http://127.0.0.1:8000";
const ADMIN_KEY_FILE = "/var/lib/memq/admin-key";

function adminKey(): string {
  const key = process.env.MEMQ_API_ADMIN_KEY || readFileSync(ADMIN_KEY_FILE, "utf8").trim();
  assert.ok(key, `no admin key: set MEMQ_API_ADMIN_KEY or create ${ADMIN_KEY_FILE}`);
  return key;
}

const run = randomUUID().replaceAll("-", "").slice(0, 10);
const user = `ts-${run}`;
const admin = new MemqClient({ baseUrl: BASE_URL, apiKey: adminKey(), maxRetries: 1 });
let client: MemqClient;
let tenantKey: string;
let keyId: string;

before(async () => {
  const created = await admin.createKey(`tssdk-${run}`, { name: "typescript sdk tests" });
  keyId = created.id;
  tenantKey = created.key;
  client = new MemqClient({ baseUrl: BASE_URL, apiKey: created.key });
});

after(async () => {
  if (!client) return;
  for (const someone of [user, README_USER]) {
    const erased = await client.eraseUser(someone);
    assert.deepEqual(erased.in_flight, []);
  }
  await admin.revokeKey(keyId);
});

/** Whether `check` came true within `withinMs`, tried every 200 ms. */
async function eventually(check: () => Promise<boolean>, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return true;
}

function storedId(job: Job): string {
  assert.equal(job.status, "succeeded", `job failed: ${job.reason ?? ""}`);
  const added = job.results.find((event) => event.event === "ADD");
  assert.ok(added, `no ADD in ${JSON.stringify(job.results)}`);
  return added.id;
}

describe("a memory's life", () => {
  const text = `Mirela keeps a ${run} sourdough starter in the fridge`;
  const requestId = `tssdk-${run}`;
  let memoryId: string;
  let jobId: string;

  test("add with wait returns the finished job, its request id recorded", async () => {
    const job = await client.add(
      text,
      { user_id: user, infer: false, wait: true, metadata: { run } },
      { requestId },
    );
    memoryId = storedId(job);
    jobId = job.job_id;
    assert.equal(job.request_id, requestId);
    assert.equal((await client.job(jobId)).status, "succeeded");
  });

  test("search finds it back", async () => {
    const found = await client.search(`${run} sourdough starter`, { user_id: user, top_k: 5 });
    assert.equal(found.results[0]?.id, memoryId);
    assert.equal(found.results[0]?.memory, text);
    assert.ok((found.results[0]?.score ?? 0) > 0);
  });

  test("get, page and getAll list it with its metadata", async () => {
    const memory = await client.get(memoryId);
    assert.equal(memory.memory, text);
    assert.deepEqual(memory.metadata, { run });
    const page = await client.page({ user_id: user, filters: { run } });
    assert.deepEqual(
      page.results.map((m) => m.id),
      [memoryId],
    );
    const all = await client.getAll({ user_id: user, page_size: 1 }).toArray();
    assert.ok(all.some((m) => m.id === memoryId));
  });

  test("get with includeSources names the message it is and the job", async () => {
    assert.equal((await client.get(memoryId)).provenance, null);
    const { provenance } = await client.get(memoryId, { includeSources: true });
    assert.ok(provenance?.known);
    assert.equal(provenance.job?.id, jobId);
    assert.deepEqual(
      (provenance.sources ?? []).map((s) => [s.content, s.role, s.job_id, s.seq]),
      [[text, "user", jobId, 0]],
    );
  });

  test("jobs lists the add", async () => {
    // A listing is a search: the jobs index shows a new record within its refresh (1 s).
    const listed = async (): Promise<boolean> => {
      const jobs = await client.jobs({ user_id: user, status: ["succeeded", "failed"] }).toArray();
      return jobs.some((job) => job.job_id === jobId);
    };
    assert.ok(await eventually(listed, 5000), `job ${jobId} never listed`);
    const none = await client.jobsPage({ user_id: user, status: "failed" });
    assert.deepEqual(none.results, []);
  });

  test("update changes the text, and history tells it", async () => {
    const updated = await client.update(memoryId, { text: `${text} and feeds it on Sundays` });
    assert.equal(updated.memory, `${text} and feeds it on Sundays`);
    const events = (await client.history(memoryId)).map((entry) => entry.event);
    assert.deepEqual(events, ["ADD", "UPDATE"]);
  });

  test("delete removes it: get is a NotFoundError, history keeps the DELETE", async () => {
    await client.delete(memoryId);
    await assert.rejects(client.get(memoryId), (error: unknown) => {
      assert.ok(error instanceof NotFoundError);
      assert.equal(error.status, 404);
      assert.ok(error.requestId);
      return true;
    });
    const events = (await client.history(memoryId)).map((entry) => entry.event);
    assert.deepEqual(events, ["ADD", "UPDATE", "DELETE"]);
  });
});

describe("jobs, batches and scopes", () => {
  test("an add without wait is accepted, then waited for", async () => {
    const accepted = await client.add([{ role: "user", content: `Tomasz plays the ${run} oboe` }], {
      user_id: user,
      run_id: "jobs",
      infer: false,
    });
    assert.equal(typeof accepted.job_id, "string");
    assert.equal(typeof accepted.created, "boolean");
    const job = await client.waitFor(accepted, { timeoutS: 60 });
    storedId(job);
    const again = await client.add([{ role: "user", content: `Tomasz plays the ${run} oboe` }], {
      user_id: user,
      run_id: "jobs",
      infer: false,
    });
    assert.equal(again.job_id, accepted.job_id, "the same conversation is the same job");
    assert.equal(again.created, false);
  });

  test("a batch queues its items, searchMany answers each query, deleteAll empties the run", async () => {
    const items = ["Ines sails a catamaran", "Ines grows chillies"].map((line) => ({
      messages: `${line} (${run})`,
      user_id: user,
      run_id: "batch",
      infer: false,
    }));
    const batch = await client.addBatch(items);
    assert.equal(batch.jobs.length, 2);
    for (const job of batch.jobs) storedId(await client.waitFor(job));
    // The batch's counts read the job records, which follow the jobs' own state shortly.
    const counted = async (): Promise<boolean> =>
      (await client.batch(batch.batch_id)).counts.succeeded === 2;
    assert.ok(await eventually(counted, 5000), "the batch never counted 2 succeeded");
    const answers = await client.searchMany([
      { query: "catamaran", user_id: user, run_id: "batch", top_k: 1 },
      { query: "chillies", user_id: user, run_id: "batch", top_k: 1 },
    ]);
    assert.match(answers.results[0]?.[0]?.memory ?? "", /catamaran/);
    assert.match(answers.results[1]?.[0]?.memory ?? "", /chillies/);
    const deleted = await client.deleteAll({ user_id: user, run_id: "batch" });
    assert.equal(deleted.deleted, 2);
  });

  test("waitFor gives up with the last state seen", async () => {
    const accepted = await client.add(`Ola counts ${run} stars`, { user_id: user, infer: false });
    await assert.rejects(client.waitFor(accepted, { timeoutS: 0 }), (error: unknown) => {
      assert.ok(error instanceof MemqTimeoutError);
      assert.equal(error.job?.job_id, accepted.job_id);
      return true;
    });
    storedId(await client.waitFor(accepted));
  });
});

describe("refusals are typed errors with the API's message", () => {
  test("a bad key is an AuthenticationError", async () => {
    const stranger = new MemqClient({ baseUrl: BASE_URL, apiKey: "mq_not_a_key" });
    await assert.rejects(stranger.search("anything", { user_id: user }), (error: unknown) => {
      assert.ok(error instanceof AuthenticationError);
      assert.equal(error.status, 401);
      assert.ok(error.detail.length > 0);
      return true;
    });
  });

  test("a tenant key on an admin route is an AuthenticationError (403)", async () => {
    await assert.rejects(client.createKey("someone-else"), (error: unknown) => {
      assert.ok(error instanceof AuthenticationError);
      assert.equal(error.status, 403);
      return true;
    });
  });

  test("an add without a scope is a ValidationError naming the field", async () => {
    await assert.rejects(client.add("no scope", { infer: false }), (error: unknown) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.status, 422);
      assert.equal(error.type, "invalid_input");
      assert.equal(error.field, "user_id");
      assert.match(error.detail, /at least one of user_id, agent_id, run_id/);
      assert.match(error.message, /^422 invalid_input: give at least one/);
      return true;
    });
  });

  test("an out-of-range search is a ValidationError", async () => {
    await assert.rejects(client.search("x", { user_id: user, top_k: 0 }), (error: unknown) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.status, 422);
      assert.match(error.field ?? "", /top_k/);
      return true;
    });
  });

  test("an unknown job is a NotFoundError, and every error is a MemqAPIError", async () => {
    await assert.rejects(client.job(`no-such-job-${run}`), (error: unknown) => {
      assert.ok(error instanceof NotFoundError);
      assert.ok(error instanceof MemqAPIError);
      return true;
    });
  });

  test("the probes answer", async () => {
    assert.equal((await client.healthz()).status, "ok");
    assert.equal((await client.readyz()).ready, true);
  });
});

const PACKAGE_ROOT = new URL("../../", import.meta.url); // build/test/ -> sdk/typescript/
const README_USER = "alice";

describe("README", () => {
  test("the TypeScript example runs as pasted", async () => {
    const readme = readFileSync(new URL("../../README.md", PACKAGE_ROOT), "utf8");
    const section = readme.slice(readme.indexOf("### TypeScript SDK"));
    const example = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
    assert.ok(example, "README has no ts block under ### TypeScript SDK");
    // Inside the package, `import ... from "memq"` resolves to its own build (dist/).
    const script = new URL("build/readme-example.mjs", PACKAGE_ROOT);
    writeFileSync(script, example);
    const env = { ...process.env, MEMQ_CLIENT_API_KEY: tenantKey, MEMQ_CLIENT_URL: BASE_URL };
    const { stdout } = await promisify(execFile)(process.execPath, [script.pathname], { env });
    const lines = stdout.trim().split("\n");
    assert.equal(lines[0], "succeeded [ 'I moved to Lisbon last year' ]");
    assert.match(lines[1] ?? "", /^[\d.]+ I moved to Lisbon last year$/);
    assert.match(lines.at(-1) ?? "", / I moved to Lisbon last year$/);
  });
});
