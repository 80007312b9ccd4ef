"""The store's read models: made from a document's ``_source``, dumped back as it was."""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.domain.models import MemoryView, Scope
from pipeline.store.reads import HistoryRow, KeyDocument, ListedMemory, MemoryRecord

AT = datetime(2026, 5, 1, 14, 3, 7, 250_000, tzinfo=UTC)


def test_a_history_row_reads_blank_fields_as_none_and_shows_no_tenant() -> None:
    source = {
        "tenant": "acme",
        "user_id": "alice",
        "memory_id": "m1",
        "event": "UPDATE",
        "job_id": "",
        "old": "likes tea",
        "new": "likes coffee",
        "created_at": AT.isoformat(),
    }
    row = HistoryRow.from_source("h1", source)
    assert row.job_id is None and row.created_at == AT
    assert row.public() == {
        "id": "h1",
        "memory_id": "m1",
        "user_id": "alice",
        "event": "UPDATE",
        "old": "likes tea",
        "new": "likes coffee",
        "created_at": AT.isoformat(),  # as stored, not re-spelt
    }


def test_a_memory_record_knows_its_scope_and_leaves_out_what_search_keeps() -> None:
    source = {
        "tenant": "acme",
        "agent_id": "helper",
        "text": "Alice likes jazz",
        "embedding": [0.1, 0.2],
        "text_lemmatized": "alice like jazz",
        "metadata": {"source": "chat"},
        "created_at": AT.isoformat(),
        "replaced_by": ["m2"],
    }
    record = MemoryRecord.from_source("m1", source)
    assert record.scope == Scope(tenant="acme", agent_id="helper")
    assert "embedding" not in record.model_dump() and "text_lemmatized" not in record.model_dump()
    assert MemoryView.from_record(record) == MemoryView.from_source("m1", source)


def test_a_key_document_is_written_as_it_was_before_it_was_typed() -> None:
    document = KeyDocument(tenant="acme", role="tenant", secret_sha256="a" * 64, created_at=AT)
    assert document.model_dump(mode="json", exclude_none=True) == {
        "tenant": "acme",
        "name": "",
        "role": "tenant",
        "secret_sha256": "a" * 64,
        "created_at": AT.isoformat(),
    }


def test_a_listed_memory_makes_the_view_its_source_made_and_keeps_its_sort_values() -> None:
    source = {
        "user_id": "alice",
        "text": "Alice likes jazz",
        "metadata": {"source": "chat"},
        "created_at": AT.isoformat(),
        "expiration_date": None,
        "replaces": ["m0"],
    }
    listed = ListedMemory.from_hit({"_id": "m1", "_source": source, "sort": [1_777_644_187_250, 7]})
    assert listed.sort == [1_777_644_187_250, 7]
    assert MemoryView.from_record(listed) == MemoryView.from_source("m1", source)
    untitled = ListedMemory.from_hit({"_id": "m2", "_source": {"user_id": "bob"}})
    assert MemoryView.from_record(untitled) == MemoryView.from_source("m2", {"user_id": "bob"})
    assert untitled.sort == []
