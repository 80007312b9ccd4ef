"""Reading and changing single memories. The tenant always comes from the caller; another
tenant's memory is indistinguishable from an absent one (``NotFoundError``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipeline.adapters.nlp.lemmatize import normalize_for_hash
from pipeline.adapters.nlp.speaker import embedding_text
from pipeline.domain.models import check_metadata, history_id, md5_hex
from pipeline.errors import InvalidInputError, NotFoundError
from pipeline.ingestion.deps import Deps
from pipeline.store.filters import metadata_pairs
from pipeline.store.protocol import HistoryDoc, ServingStore
from pipeline.store.reads import HistoryRow, MemoryRecord

MAX_TEXT_CHARS = 20_000


def get_memory(store: ServingStore, tenant: str, memory_id: str) -> MemoryRecord:
    """The memory; ``NotFoundError`` if it is not this tenant's."""
    memory = store.get_memory(memory_id)
    if memory is None or memory.tenant != tenant:
        raise NotFoundError(f"no memory {memory_id}")
    return memory


def update_memory(
    store: ServingStore,
    deps: Deps,
    tenant: str,
    memory_id: str,
    *,
    text: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> MemoryRecord:
    """Change a memory's text (re-embedded, re-lemmatized, re-hashed) and/or metadata, with an
    UPDATE history row. The id stays. Entity links are kept as they were."""
    check_update(text, metadata)
    current = get_memory(store, tenant, memory_id)
    fields: dict[str, Any] = {"updated_at": deps.clock().isoformat()}
    if text is not None:
        fields |= text_fields(deps, text, current.speaker)
    if metadata is not None:
        fields |= {"metadata": metadata, "metadata_kv": metadata_pairs(metadata)}
    store.update_memory(memory_id, fields, current.scope)
    row_at = deps.clock()
    store.write_history([history_row(current, "UPDATE", row_at, old=current.text, new=text)])
    return get_memory(store, tenant, memory_id)


def check_update(text: object, metadata: object) -> None:
    """Refuse an update before anything is written: text a non-blank string of at most
    ``MAX_TEXT_CHARS``, metadata a bounded object, and at least one of them."""
    if text is None and metadata is None:
        raise InvalidInputError("nothing to update: give text and/or metadata", field="text")
    if text is not None and (
        not isinstance(text, str) or not text.strip() or len(text.strip()) > MAX_TEXT_CHARS
    ):
        raise InvalidInputError(
            f"text must be a string of 1..{MAX_TEXT_CHARS} characters", field="text"
        )
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidInputError("metadata must be an object", field="metadata")
        try:
            check_metadata(metadata)
        except ValueError as exc:
            raise InvalidInputError(str(exc), field="metadata") from exc


def text_fields(deps: Deps, text: str, speaker: str | None = None) -> dict[str, Any]:
    """The fields that follow from a memory's text; the embedding keeps its ``speaker``."""
    cleaned = text.strip()
    return {
        "text": cleaned,
        "text_lemmatized": deps.lemmatizer.lemmatize(cleaned),
        "hash": md5_hex(normalize_for_hash(cleaned)),
        "embedding": deps.embedder.embed([embedding_text(cleaned, speaker)])[0],
    }


def delete_memory(store: ServingStore, tenant: str, memory_id: str, now: datetime) -> None:
    current = get_memory(store, tenant, memory_id)
    store.delete_memories({memory_id: current.scope})
    store.write_history([history_row(current, "DELETE", now, old=current.text)])


def memory_history(store: ServingStore, tenant: str, memory_id: str) -> list[HistoryRow]:
    """The memory's history rows, oldest first (kept after the memory is deleted)."""
    rows = store.memory_history(memory_id)
    if not rows:
        get_memory(store, tenant, memory_id)  # NotFoundError when it never was this tenant's
    rows = [row for row in rows if row.tenant == tenant]
    if not rows:
        raise NotFoundError(f"no memory {memory_id}")
    return rows


def history_row(
    current: MemoryRecord,
    event: str,
    at: datetime,
    old: str | None = None,
    new: str | None = None,
) -> HistoryDoc:
    return HistoryDoc(
        id=history_id(current.id, event, at.isoformat()),
        memory_id=current.id,
        scope=current.scope,
        event=event,
        job_id="",
        created_at=at,
        old=old,
        new=new,
    )
