"""``memq demo``: the running stack doing its main job, step by step, on a sample conversation.

With an LLM configured (OPENAI_API_KEY, or MEMQ_LLM_BASE_URL for any OpenAI-compatible server)
facts are extracted; without one the raw turns are stored (infer=false). Then a search.
Running it again finds the same job (ingestion is idempotent) and searches again.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pipeline.config import Settings
from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.ingestion.capability import refusal
from pipeline.serving.search import SearchQuery
from workers.app import HEALTH_TASK, MemqCelery, create_celery
from workers.intake import submit

SCOPE = Scope(tenant="demo", user_id="demo-user")
CONVERSATION = [
    ("user", "Hi! I just moved to Lisbon for a job at a robotics startup."),
    ("assistant", "Congratulations! How are you finding Lisbon so far?"),
    (
        "user",
        "I love it. I'm vegetarian, so the food took some exploring, but I found a great "
        "falafel place in Alfama. My sister Ana visits in June.",
    ),
    ("assistant", "That sounds lovely. Enjoy Alfama and your sister's visit!"),
]
QUESTION = "Where does the user live and what do they eat?"


def run_demo(settings: Settings, timeout_s: float) -> int:
    """Round-trip a task, ingest the sample conversation, search it. Returns an exit status."""
    app = create_celery(settings)
    reply = app.send_task(HEALTH_TASK).get(timeout=timeout_s)
    print(f"demo: worker {reply['worker']} sees Elasticsearch {reply['elasticsearch']['status']}")
    request = sample_request(settings)
    record = ingest(app, request, timeout_s)
    if record.status != JobStatus.SUCCEEDED:
        print(f"demo: job {record.job_id} {record.status}: {record.reason}")
        return 1
    print(f"demo: job {record.job_id} succeeded; {len(record.results)} memories:")
    for memory in record.results:
        print(f"  - {memory.text}")
    show_search(app)
    return 0


def sample_request(settings: Settings) -> AddRequest:
    """The sample conversation, with facts extracted when this stack can (the intake's own
    check, ``pipeline.ingestion.capability``), else stored as the raw turns (infer=false)."""
    request = AddRequest(
        scope=SCOPE,
        messages=[MessageIn.model_validate({"role": r, "content": t}) for r, t in CONVERSATION],
        timestamp=datetime(2026, 5, 4, 18, 30, tzinfo=UTC),
    )
    refused = refusal(request, settings)
    if refused is None:
        return request
    print(f"demo: {refused.reason}; storing the raw turns (infer=false)")
    return request.model_copy(update={"infer": False})


def ingest(app: MemqCelery, request: AddRequest, timeout_s: float) -> JobRecord:
    accepted = submit(app, request)
    verb = JobStatus.QUEUED if accepted.created else "already known as"
    print(f"demo: conversation {verb} job {accepted.record.job_id}")
    deadline = time.monotonic() + timeout_s
    record = accepted.record
    while not record.ended and time.monotonic() < deadline:
        time.sleep(0.2)
        record = app.runtime.store.get_job(record.job_id) or record
    return record


def show_search(app: MemqCelery) -> None:
    app.runtime.store.make_visible()
    hits = app.runtime.searcher.search(
        SearchQuery(query=QUESTION, scope=SCOPE, top_k=3, explain=True)
    )
    print(f"demo: search {QUESTION!r}:")
    for hit in hits:
        assert hit.explain is not None
        print(
            f"  {hit.score:.3f}  {hit.memory}   (semantic {hit.explain.semantic:.2f}, "
            f"bm25 {hit.explain.bm25:.2f}, entity {hit.explain.entity:.2f})"
        )
