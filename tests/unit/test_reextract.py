"""The rules of a re-extraction that need no store: the order jobs are replayed in, the
checkpoint's pages, the names of a build and when a run would repeat the version in use."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pipeline.domain.jobs import JobRecord, JobStatus
from pipeline.features.reextract import Extraction, pages_of, request_of, same_settings, waves
from pipeline.store.indices import IndexNames, Kind
from pipeline.store.reextract import BuildNames, others_query

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(job_id: str, session: str, minute: int = 0, **request: object) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        tenant="t",
        status=JobStatus.SUCCEEDED,
        session_key=session,
        request={
            "scope": {"tenant": "t", "user_id": session},
            "messages": [{"role": "user", "content": f"said in {job_id}"}],
            **request,
        },
        created_at=T0 + timedelta(minutes=minute),
        updated_at=T0,
    )


def test_waves_keep_each_sessions_order_and_run_sessions_side_by_side() -> None:
    jobs = [record("a1", "a"), record("a2", "a"), record("b1", "b"), record("a3", "a"),
            record("c1", "c"), record("b2", "b")]  # fmt: skip
    assert [[r.job_id for r in wave] for wave in waves(jobs)] == [
        ["a1", "b1", "c1"],
        ["a2", "b2"],
        ["a3"],
    ]
    assert waves([]) == []


def test_pages_cut_the_records_for_the_checkpoint() -> None:
    items = [(record(str(i), "s"), [i]) for i in range(7)]
    assert [[sort for _, sort in page] for page in pages_of(items, 3)] == [
        [[0], [1], [2]],
        [[3], [4], [5]],
        [[6]],
    ]


def test_a_replayed_request_notifies_no_one() -> None:
    job = record("j", "s", webhook_url="https://example.com/hook", infer=False)
    request = request_of(job)
    assert request.webhook_url is None
    assert request.infer is False
    assert request.messages[0].content == "said in j"


def test_build_names_point_the_vector_kinds_at_the_build_only() -> None:
    names = BuildNames("p", memories_index="p-memories-v2-x1", entities_index="p-entities-v2-x1")
    assert names.memories == "p-memories-v2-x1"
    assert names.entities == "p-entities-v2-x1"
    plain = IndexNames("p")
    for kind in (Kind.HISTORY, Kind.MESSAGES, Kind.JOBS, Kind.KEYS):
        assert names.alias(kind) == plain.alias(kind)


def test_a_version_re_extracted_alike_is_recognised() -> None:
    extraction = Extraction("m", "http://llm/v1", ("extract_user_v3", "procedural_v1"))
    stored = {
        "mode": "reextract",
        "tenant": "t",
        "llm": {"model": "m", "base_url": "http://llm/v1"},
        "prompts": ["extract_user_v3", "procedural_v1"],
    }
    assert same_settings(stored, extraction, "t")
    assert not same_settings(stored, extraction, None)
    assert not same_settings(stored, Extraction("other", "http://llm/v1", extraction.prompts), "t")
    assert not same_settings(stored, Extraction("m", "http://llm/v1", ("extract_user_v4",)), "t")
    assert "reextract with m at http://llm/v1" in extraction.describe()


def test_only_a_tenant_re_extraction_copies_the_others() -> None:
    assert others_query(None) is None
    assert others_query("t") == {"bool": {"must_not": [{"term": {"tenant": "t"}}]}}
