"""What the store's reads answer: typed, frozen records of the stored documents, made in one
place from Elasticsearch's ``_source`` (or the in-process store's), so that callers read
attributes instead of indexing dicts. The documents written are in ``protocol.py``.

A time is read as a ``Stamp``: a ``datetime`` that a JSON dump writes back as the
``isoformat`` it was stored with, so a record handed on as JSON reads as the document did.
Fields the store keeps for its own use (vectors, lemmas, substrings) are not read."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, field_validator

from pipeline.domain.models import VIEW_SOURCE_FIELDS, Scope

Stamp = Annotated[datetime, PlainSerializer(datetime.isoformat, when_used="json")]


class _Read(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    @classmethod
    def from_source(cls, doc_id: str, source: Mapping[str, Any]) -> Self:
        """From a document's id and its ``_source``."""
        return cls.model_validate({**source, "id": doc_id})


class _ViewRead(_Read):
    """A read a ``MemoryView`` is made from (``MemoryView.from_record``): a memory's id and
    the ``_source`` fields of ``VIEW_SOURCE_FIELDS``."""

    id: str
    text: str = ""
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    role: str | None = None
    memory_type: str | None = None
    attributed_to: str | None = None
    hash: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: Stamp | None = None
    updated_at: Stamp | None = None
    observed_at: Stamp | None = None
    expiration_date: Stamp | None = None
    valid_until: Stamp | None = None
    replaced_by: list[str] | None = None
    replaces: list[str] | None = None
    feedback: str | None = None
    feedback_reason: str | None = None

    def view_fields(self) -> dict[str, Any]:
        """The ``_source`` fields a ``MemoryView`` is made from, those it has."""
        return self.model_dump(include=set(VIEW_SOURCE_FIELDS), exclude_none=True)


class MemoryRecord(_ViewRead):
    """A memory as a read by id answers it: its scope, text and every field callers may see
    or change; not its vector, lemmas, substrings or metadata pairs (search's own).
    ``job_id`` is blank for a memory imported without one."""

    tenant: str
    text: str
    job_id: str | None = None
    speaker: str | None = None
    language: str | None = None
    entity_ids: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(default_factory=list)
    turn: int | None = None
    feedback_at: Stamp | None = None

    @property
    def scope(self) -> Scope:
        """The scope the memory belongs to, from its own fields."""
        return Scope(
            tenant=self.tenant, user_id=self.user_id, agent_id=self.agent_id, run_id=self.run_id
        )


class ListedMemory(_ViewRead):
    """A memory as one page of a listing reads it: the fields a view shows and the hit's sort
    values, which the next page starts after."""

    sort: list[Any] = Field(default_factory=list)

    @classmethod
    def from_hit(cls, hit: Mapping[str, Any]) -> Self:
        """From a search hit: its ``_id``, ``_source`` and ``sort``."""
        return cls.model_validate({**hit["_source"], "id": hit["_id"], "sort": hit.get("sort", [])})


class StoreHealth(BaseModel):
    """The storage behind a store: its name, ``green``, ``yellow`` or ``red``, its nodes."""

    model_config = ConfigDict(frozen=True)

    cluster: str
    status: str
    nodes: int


class JobSummary(BaseModel):
    """A job as the operators' lists show it: its id, why it ended so, its last update."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    job_id: str
    reason: str | None = None
    updated_at: datetime


class StoredMessage(_Read):
    """A message as given to memq, stored under ``models.message_id(job_id, seq)``."""

    id: str
    tenant: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    job_id: str
    seq: int
    role: str
    name: str | None = None
    content: str
    created_at: Stamp


class EntityRef(_Read):
    """An entity as a memory's detail names it."""

    id: str
    tenant: str
    text: str
    type: str | None = None


class HistoryRow(_Read):
    """One event of a memory (ADD, UPDATE, DELETE, REPLACED), kept after it is deleted.
    ``job_id`` is None for an edit made through the API (stored blank); a blank field reads
    as None."""

    id: str
    memory_id: str
    tenant: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    event: str
    job_id: str | None = None
    old: str | None = None
    new: str | None = None
    actor: str | None = None
    replaced_by: str | None = None
    created_at: Stamp

    @field_validator("job_id", "old", "new", "actor", "replaced_by", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value

    def public(self) -> dict[str, Any]:
        """The row as callers see it: without its tenant and the fields it has no value for."""
        return self.model_dump(mode="json", exclude={"tenant"}, exclude_none=True)


class KeyDocument(_Read):
    """An API key as stored (``pipeline.serving.keys`` makes it): whose it is, its role, the hash of
    its secret (left out when keys are listed), when it was made and revoked."""

    tenant: str
    name: str = ""
    role: str
    secret_sha256: str | None = None
    created_at: Stamp
    revoked_at: Stamp | None = None


class ListedKey(KeyDocument):
    """A key as listed: its id and document, never the hash of its secret."""

    id: str


class _Dumped(_Read):
    """A document as a dump reads it: its fields kept as stored (times as the strings they
    were written as), so a dump writes back what it read, byte for byte."""


class DumpedEntity(_Dumped):
    """An entity as a dump reads it (without its links); ``embedding`` only when asked for."""

    id: str
    text: str
    normalized: str
    type: str | None = ""
    embedding: list[int | float] | None = None

    @property
    def has_embedding(self) -> bool:
        """Whether the read carried the entity's vector (a dump with vectors)."""
        return "embedding" in self.model_fields_set


class DumpedMessage(_Dumped):
    """A message a memory came from, as a dump reads it."""

    id: str
    role: str | None = None
    name: str | None = None
    content: str | None = None
    created_at: str | None = None
    job_id: str | None = None
    seq: int | None = None


class DumpedHistoryRow(_Dumped):
    """One event of a memory, as a dump reads it: a blank ``job_id`` stays blank."""

    id: str
    memory_id: str
    event: str | None = None
    job_id: str | None = None
    created_at: str | None = None
    old: str | None = None
    new: str | None = None
    actor: str | None = None
    replaced_by: str | None = None
