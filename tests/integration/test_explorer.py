"""The explorer at ``/ui`` in a real browser (Playwright driving Debian's chromium) against a
real API process and worker: sign in, browse a scope seeded through the API, a memory's
history, a search's explain, a failed job replayed, a user erased, the admin pages, and no
page of one tenant showing another's data. Each page's screenshot goes to docs/img/."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.conftest import admin_key
from tests.fakellm import Delay, Fail, FakeLLMServer
from tests.processes import WorkerProcess

pytestmark = pytest.mark.integration

CHROMIUM = Path("/usr/bin/chromium")  # Debian's (ops/install installs it)
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "img"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"no chromium at {CHROMIUM}: run ops/install (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()


def new_key(api_url: str, tenant: str) -> str:
    created = httpx.post(
        f"{api_url}/v1/admin/keys",
        json={"tenant": tenant, "name": "explorer test"},
        headers={"Authorization": f"Bearer {admin_key()}"},
        timeout=30,
    )
    created.raise_for_status()
    key: str = created.json()["key"]
    return key


class Tenant:
    """A tenant with a key, an API client, and what was seeded for it."""

    def __init__(self, api_url: str, name: str) -> None:
        self.name = name
        self.key = new_key(api_url, name)
        self.api = httpx.Client(
            base_url=api_url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60
        )

    def add(self, user: str, messages: Any, infer: bool = False, **extra: Any) -> dict[str, Any]:
        body = {"messages": messages, "user_id": user, "infer": infer, **extra}
        answer = self.api.post("/v1/memories", params={"wait": "true"}, json=body)
        assert answer.status_code == 200, answer.text
        job: dict[str, Any] = answer.json()
        return job

    def memories(self, user: str) -> list[dict[str, Any]]:
        answer = self.api.get("/v1/memories", params={"user_id": user})
        assert answer.status_code == 200, answer.text
        results: list[dict[str, Any]] = answer.json()["results"]
        return results


@pytest.fixture(scope="module")
def seeded(api_url: str, worker: WorkerProcess) -> Iterator[dict[str, Any]]:
    """Tenant A: alice (a conversation, with metadata), carol (to erase); tenant B: bob."""
    suffix = uuid.uuid4().hex[:6]
    a, b = Tenant(api_url, f"explore-a-{suffix}"), Tenant(api_url, f"explore-b-{suffix}")
    conversation = [
        {"role": "user", "content": "I go hiking in the Alps every August."},
        {"role": "assistant", "content": "That sounds wonderful. Which trails?"},
        {"role": "user", "content": "Mostly the Haute Route, with my sister Emma."},
    ]
    job = a.add("alice", conversation, metadata={"source": "chat"})
    a.add("alice", "My favourite tea is a smoky lapsang souchong.", metadata={"topic": "food"})
    a.add("carol", "Carol keeps bees on her roof in Lyon.")
    a.add("carol", "Carol's hives gave 12 kilos of honey this year.")
    b.add("bob", "Bob's secret project is a hiking map of the Pyrenees.")
    yield {"a": a, "b": b, "alice_job": job}
    a.api.close()
    b.api.close()


def open_page(browser: Browser) -> Page:
    return browser.new_context(viewport=VIEWPORT).new_page()


def sign_in(browser: Browser, api_url: str, key: str) -> Page:
    page = open_page(browser)
    page.goto(f"{api_url}/ui/login")
    page.fill("input[name=key]", key)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return page


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"explorer-{name}.png"))


def test_sign_in_and_browse_a_scope(browser: Browser, api_url: str, seeded: dict[str, Any]) -> None:
    page = open_page(browser)
    answer = page.goto(f"{api_url}/ui/scopes")
    assert answer is not None
    assert page.url.endswith("/ui/login"), "a page without a session asks to sign in"
    shot(page, "login")
    page.fill("input[name=key]", "mq_0123456789abcdef_not-a-real-secret-at-all")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("Unknown or revoked key")

    page.fill("input[name=key]", seeded["a"].key)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/scopes$"))
    cookie = next(c for c in page.context.cookies() if c["name"] == "memq_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["expires"] == -1, "a session cookie: gone when the browser closes"
    assert seeded["a"].key not in cookie["value"] and "mq_" not in page.content()
    alice = page.locator("tr", has_text="alice")
    expect(alice.locator("td.num")).to_have_text("4")  # 3 turns + 1 note, verbatim
    expect(page.locator("tr", has_text="carol").locator("td.num")).to_have_text("2")
    shot(page, "scopes")

    page.click("text=alice")
    expect(page.locator("h1")).to_contain_text("alice")
    expect(page.locator("tbody tr")).to_have_count(4)
    expect(page.locator("tbody tr").first).to_contain_text("lapsang")  # newest first
    shot(page, "memories")

    page.fill("input[name=contains]", "haute route")
    page.click("text=Apply")
    expect(page.locator("tbody tr")).to_have_count(1)
    page.fill("input[name=contains]", "")
    page.fill("input[name=filters]", '{"topic": "food"}')
    page.select_option("select[name=sort]", "oldest")
    page.fill("input[name=size]", "1")
    page.click("text=Apply")
    expect(page.locator("tbody tr")).to_have_count(1)
    expect(page.locator("tbody tr")).to_contain_text("lapsang")

    page.fill("input[name=filters]", "")
    page.click("text=Apply")
    seen = [page.locator("tbody tr td a").first.inner_text()]
    more = page.locator("a.button", has_text="Next page")
    while more.count():
        more.click()
        seen.append(page.locator("tbody tr td a").first.inner_text())
    assert len(seen) == 4 == len(set(seen)), seen  # a page of one, oldest first, each once
    assert "Alps" in seen[0]


def test_a_memory_its_conversation_and_history_after_an_edit(
    browser: Browser, api_url: str, seeded: dict[str, Any]
) -> None:
    memory = next(m for m in seeded["a"].memories("alice") if "Haute Route" in m["memory"])
    page = sign_in(browser, api_url, seeded["a"].key)
    page.goto(f"{api_url}/ui/memories/{memory['id']}")
    expect(page.locator("h1")).to_have_text("Mostly the Haute Route, with my sister Emma.")
    conversation = page.locator("section", has_text="The conversation it came from")
    expect(conversation.locator(".msg")).to_have_count(3)
    expect(conversation).to_contain_text("Which trails?")
    # a raw turn came from its own message: that one is marked, the others are not
    expect(conversation.locator(".msg.source")).to_have_count(1)
    expect(conversation.locator(".msg.source")).to_contain_text("Haute Route")
    expect(conversation).to_contain_text("Marked: the 1 message it came from")

    page.fill("textarea[name=text]", "Mostly the Haute Route and the Tour du Mont Blanc.")
    page.click("text=Save")
    expect(page.locator("h1")).to_contain_text("Tour du Mont Blanc")
    history = page.locator("table.history tbody tr")
    expect(history).to_have_count(2)
    expect(history.nth(0)).to_contain_text("ADD")
    expect(history.nth(1)).to_contain_text("UPDATE")
    expect(history.nth(1).locator("del")).to_have_text(
        "Mostly the Haute Route, with my sister Emma."
    )
    shot(page, "memory")

    note = next(m for m in seeded["a"].memories("alice") if "lapsang" in m["memory"])
    page.goto(f"{api_url}/ui/memories/{note['id']}")
    page.click("text=Delete…")
    expect(page.locator("h1")).to_have_text("Delete this memory?")
    expect(page.locator(".confirm li")).to_contain_text("lapsang souchong")
    page.click("button:has-text('Delete the memory')")
    expect(page.locator("h1")).to_contain_text("alice")
    assert "lapsang" not in page.content()
    assert all("lapsang" not in m["memory"] for m in seeded["a"].memories("alice"))


def test_a_search_and_its_explain(browser: Browser, api_url: str, seeded: dict[str, Any]) -> None:
    page = sign_in(browser, api_url, seeded["a"].key)
    page.goto(f"{api_url}/ui/search")
    page.fill("input[name=query]", "where does alice go hiking")
    page.fill("input[name=user_id]", "alice")
    page.fill("input[name=reference_time]", "2025-09-01T12:00:00Z")
    page.fill("input[name=top_k]", "5")
    page.click("button:has-text('Search')")
    rows = page.locator("table.explain tbody tr")
    expect(rows.first).to_contain_text("Alps")
    top = rows.first.locator("td").all_inner_texts()
    score, fused, semantic, bm25 = (float(top[i].split()[0]) for i in (2, 3, 4, 5))
    assert 0 < score <= 1 and fused > 0 and 0 < semantic <= 1 and 0 < bm25 <= 1, top
    scores = [float(r.split("\t")[2]) for r in rows.all_inner_texts()]
    assert scores == sorted(scores, reverse=True), scores  # never rising down the list
    headers = page.locator("table.explain thead th").all_inner_texts()
    for signal in ("FUSED", "SEMANTIC", "BM25", "ENTITY", "TIME", "HOP", "REPLY TO"):
        assert signal in [h.upper() for h in headers], headers
    shot(page, "search")

    page.fill("input[name=filters]", "{not json")
    page.click("button:has-text('Search')")
    expect(page.get_by_role("alert")).to_contain_text("filters is not valid JSON")


def test_a_failed_job_is_found_and_replayed(
    browser: Browser, api_url: str, seeded: dict[str, Any], fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(Fail(400, "the model refused this conversation"))
    failed = seeded["a"].add("dave", "Dave's conversation that the model refuses.", infer=True)
    assert failed["status"] == "failed", failed
    time.sleep(1.2)  # the jobs index refreshes every second: a listing is a search
    page = sign_in(browser, api_url, seeded["a"].key)
    page.goto(f"{api_url}/ui/jobs")
    page.select_option("select[name=status]", "failed")
    page.click("text=Apply")
    row = page.locator("tbody tr", has_text=failed["job_id"][:16])
    expect(row).to_contain_text("refused")
    shot(page, "jobs")
    row.locator("a").first.click()
    expect(page.locator(".error")).to_contain_text("the model refused this conversation")
    expect(page.locator("h1 .status")).to_have_text("failed")
    shot(page, "job")

    page.click("text=Replay this job")
    deadline = time.monotonic() + 60
    while "succeeded" not in page.locator("h1 .status").inner_text():
        assert time.monotonic() < deadline, "the replayed job did not succeed"
        time.sleep(1)
        page.reload()
    expect(page.locator("text=Replay this job")).to_have_count(0)


def test_a_batch_shows_its_progress_live(
    browser: Browser, api_url: str, seeded: dict[str, Any], fake_llm: FakeLLMServer
) -> None:
    fake_llm.script_chat(*[Delay(1.5)] * 3)  # one user: its three jobs run one after another
    items = [{"messages": f"Batch note {i}", "user_id": "erin", "infer": True} for i in range(3)]
    page = sign_in(browser, api_url, seeded["a"].key)
    answer = seeded["a"].api.post("/v1/batches", json={"items": items})
    assert answer.status_code == 202, answer.text
    batch_id = answer.json()["batch_id"]
    assert seeded["a"].api.get(f"/v1/batches/{batch_id}").status_code == 200  # searchable
    page.goto(f"{api_url}/ui/batches/{batch_id}")
    progress = page.locator("#progress")
    expect(progress).to_contain_text("updating live")
    assert "3 of 3" not in progress.inner_text()
    # the fragment polls itself (htmx) until every job has ended, without a reload
    expect(progress).to_contain_text("3 of 3 jobs ended", timeout=60_000)
    expect(progress).to_contain_text("finished")
    shot(page, "batch")
    page.click("text=← this batch's jobs")
    expect(page.locator("tbody tr")).to_have_count(3)
    page.goto(f"{api_url}/ui/jobs")  # the tenant's counts, live while any job is unfinished
    expect(page.locator("#progress")).to_contain_text("jobs ended")


def test_erase_a_user_after_a_confirmation_that_names_what_goes(
    browser: Browser, api_url: str, seeded: dict[str, Any]
) -> None:
    page = sign_in(browser, api_url, seeded["a"].key)
    page.goto(f"{api_url}/ui/scopes")
    page.locator("tr", has_text="carol").locator("text=erase…").click()
    expect(page.locator("h1")).to_have_text("Erase the user carol?")
    expect(page.locator(".confirm li").first).to_have_text(
        "2 memories of carol, and the text in their history"
    )
    expect(page.locator(".confirm li").nth(1)).to_contain_text("2 job records (2 succeeded)")
    shot(page, "erase")
    page.fill("input[name=confirm]", "someone else")
    page.click("button:has-text('Erase carol')")
    expect(page.get_by_role("alert")).to_contain_text("type carol to confirm")
    assert len(seeded["a"].memories("carol")) == 2

    page.go_back()
    page.fill("input[name=confirm]", "carol")
    page.click("button:has-text('Erase carol')")
    expect(page.locator("h1")).to_have_text("carol was erased")
    assert seeded["a"].memories("carol") == []


def test_admin_creates_and_revokes_keys_and_a_revoked_key_ends_its_sessions(
    browser: Browser, api_url: str, seeded: dict[str, Any]
) -> None:
    tenant = seeded["a"].name
    page = sign_in(browser, api_url, admin_key())
    expect(page).to_have_url(re.compile(r"/ui/admin$"))
    expect(page.locator("tr", has_text=tenant).first).to_be_visible()
    page.fill("input[name=tenant]", tenant)
    page.fill("input[name=name]", "revoked by the test")
    page.click("text=Create key")
    token = page.locator("#new-key").inner_text()
    assert token.startswith("mq_")
    user = sign_in(browser, api_url, token)
    expect(user).to_have_url(re.compile(r"/ui/scopes$"))

    page.goto(f"{api_url}/ui/admin")
    shot(page, "admin")
    key_id = token.split("_")[1]
    page.locator("tr", has_text=key_id).locator("text=revoke…").click()
    page.click("button:has-text('Revoke the key')")
    expect(page.locator("tr", has_text=key_id)).not_to_contain_text("revoke…")
    time.sleep(0.1)
    user.goto(f"{api_url}/ui/scopes")
    assert user.url.endswith("/ui/login"), "a revoked key's session ends"

    tenant_page = sign_in(browser, api_url, seeded["b"].key)
    answer = tenant_page.goto(f"{api_url}/ui/admin")
    assert answer is not None and answer.status == 403


def test_no_page_shows_another_tenants_data(
    browser: Browser, api_url: str, seeded: dict[str, Any]
) -> None:
    a, b = seeded["a"], seeded["b"]
    alice_memory = a.memories("alice")[0]
    job_id = seeded["alice_job"]["job_id"]
    page = sign_in(browser, api_url, b.key)
    expect(page.locator("tbody")).not_to_contain_text("alice")
    expect(page.locator("tbody")).to_contain_text("bob")

    for path in (f"/ui/memories/{alice_memory['id']}", f"/ui/jobs/{job_id}"):
        answer = page.goto(f"{api_url}{path}")
        assert answer is not None and answer.status == 404, path
        assert alice_memory["memory"] not in page.content()
    page.goto(f"{api_url}/ui/memories?user_id=alice")
    expect(page.locator("tbody")).to_contain_text("No memories match.")
    page.goto(f"{api_url}/ui/jobs")
    assert job_id[:16] not in page.content()
    page.goto(f"{api_url}/ui/search?query=hiking&user_id=alice")
    expect(page.locator("table.explain tbody")).to_contain_text("Nothing found.")

    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    for path in (f"/ui/jobs/{job_id}/replay", f"/ui/memories/{alice_memory['id']}/delete"):
        answer = page.request.post(f"{api_url}{path}", form={"csrf": csrf or ""})
        assert answer.status == 404, path
        refused = page.request.post(f"{api_url}{path}", form={"csrf": "forged"})
        assert refused.status == 403, path
    assert any(m["id"] == alice_memory["id"] for m in a.memories("alice"))

    page.goto(f"{api_url}/ui/scopes")
    page.click("text=Sign out")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.goto(f"{api_url}/ui/jobs")
    assert page.url.endswith("/ui/login"), "signed out: no page without signing in again"


def test_admin_sees_the_index_versions_and_plans_a_re_embed(
    browser: Browser, api_url: str, seeded: dict[str, Any]
) -> None:
    page = sign_in(browser, api_url, admin_key())
    section = page.locator("#index-versions")
    assert page.title().startswith("Admin") and "Index" not in page.title()
    expect(section.locator("h2").first).to_have_text("Index versions")
    status = httpx.get(f"{api_url}/v1/admin/reprocess", timeout=30,
                       headers={"Authorization": f"Bearer {admin_key()}"}).json()  # fmt: skip
    expect(page.locator("#embedder-in-use")).to_contain_text(status["embedder"]["model"])
    for version in status["versions"]:
        row = section.locator("tr", has_text=version["index"]).first
        expect(row).to_contain_text(version["state"])
    section.scroll_into_view_if_needed()
    shot(page, "admin-index-versions")

    # the embedder in use cannot be re-embedded into: a readable refusal, nothing started
    page.click("#reembed-form button:has-text('Start re-embed')")
    expect(page.get_by_role("alert")).to_contain_text("already hold vectors of")
    page.go_back()

    page.fill("#reembed-form input[name=model]", "another-embedder")
    page.fill("#reembed-form input[name=dims]", "96")
    page.click("#reembed-form button:has-text('Plan (dry run)')")
    expect(page.locator("h1")).to_have_text("Re-embed plan")
    expect(page.locator("#reprocess-plan")).to_contain_text("embedding calls")
    expect(page.locator("main")).to_contain_text("another-embedder")

    page.goto(f"{api_url}/ui/admin")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    answer = page.request.post(f"{api_url}/ui/admin/reprocess",
                               form={"csrf": csrf, "dims": "4", "model": "tiny"})  # fmt: skip
    assert answer.status == 422 and "embedder.dims" in answer.text(), answer.text()
    after = httpx.get(f"{api_url}/v1/admin/reprocess", timeout=30,
                      headers={"Authorization": f"Bearer {admin_key()}"}).json()  # fmt: skip
    assert after["active"] is False and after["versions"] == status["versions"]

    # a re-extraction's plan counts the jobs it would replay, and a bad tenant is refused
    page.goto(f"{api_url}/ui/admin")
    page.click("#reextract-form button:has-text('Plan (dry run)')")
    expect(page.locator("h1")).to_have_text("Re-extract plan")
    expect(page.locator("#reprocess-plan")).to_contain_text("LLM tokens")
    jobs = int(page.locator("#reprocess-plan dd").first.inner_text())
    assert jobs > 0
    answer = page.request.post(f"{api_url}/ui/admin/reextract",
                               form={"csrf": csrf, "tenant": "not a tenant!"})  # fmt: skip
    assert answer.status == 422 and "tenant" in answer.text(), answer.text()
