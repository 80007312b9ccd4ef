"""Typed models of memq's domain, grouped by role: what callers send (``*In``), what the
pipeline carries between phases, and what is stored (``*Doc``)."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

NAMESPACE = uuid.UUID("6f1c1b1e-8a1e-4bb8-9d4e-6d656d710001")
_ID_PATTERN = r"^[^\s]{1,128}$"
_MAX_MESSAGE_CHARS = 100_000
_MAX_MESSAGES = 500

# Cc (controls, U+001F among them: the separator inside scope keys), Cf (invisible format
# characters such as bidi overrides), Cs (lone surrogates)
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})


def _plain_identifier(value: str) -> str:
    """``value`` unchanged when every character is visible text; a ``ValueError`` naming the
    first control or format character otherwise. Scope keys join ids with U+001F, so an id
    holding one could name another user's scope (an erasure of ``x`` reaching ``x\x1fy``)."""
    for char in value:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise ValueError(f"an id may not hold control or format characters (U+{ord(char):04X})")
    return value


Identifier = Annotated[
    str, StringConstraints(pattern=_ID_PATTERN), AfterValidator(_plain_identifier)
]


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


AwareDatetime = Annotated[datetime, AfterValidator(_aware)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scope(_Model):
    """Whose memory: a tenant and at least one of user, agent, run."""

    tenant: Identifier = "default"
    user_id: Identifier | None = None
    agent_id: Identifier | None = None
    run_id: Identifier | None = None

    @model_validator(mode="after")
    def _one_owner(self) -> Scope:
        if self.user_id is None and self.agent_id is None and self.run_id is None:
            raise ValueError("at least one of user_id, agent_id, run_id is required")
        return self

    @property
    def key(self) -> str:
        """A stable string naming this scope (also the session key of its message window)."""
        parts = (self.tenant, self.user_id or "", self.agent_id or "", self.run_id or "")
        return "\x1f".join(parts)

    def fields(self) -> dict[str, str]:
        """The scope as document fields (absent ids omitted)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class TextPart(_Model):
    type: Literal["text"] = "text"
    text: str = Field(max_length=_MAX_MESSAGE_CHARS)


class ImageUrl(_Model):
    url: str = Field(max_length=2_000_000)

    @field_validator("url")
    @classmethod
    def _is_image_url(cls, value: str) -> str:
        if not re.match(
            r"^(https?://[^\s/]+\S*|data:image/[a-z0-9.+-]+;base64,[A-Za-z0-9+/=]+)$", value
        ):
            raise ValueError("must be an http(s) URL or a base64 data:image URL")
        return value


class ImagePart(_Model):
    type: Literal["image_url"] = "image_url"
    image_url: ImageUrl


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageIn(_Model):
    """One message of a conversation: text, or a list of text and image parts."""

    role: Role
    content: str | list[ContentPart] = Field(max_length=_MAX_MESSAGE_CHARS)
    name: Identifier | None = None

    def text(self) -> str:
        """The text of the message (text parts joined; images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))

    def images(self) -> list[str]:
        if isinstance(self.content, str):
            return []
        return [p.image_url.url for p in self.content if isinstance(p, ImagePart)]


class MemoryType(StrEnum):
    SEMANTIC = "semantic_memory"
    EPISODIC = "episodic_memory"
    PROCEDURAL = "procedural_memory"


class AddRequest(_Model):
    """A conversation to turn into memories. ``timestamp`` is when it happened (the observation
    time of every fact it yields); backfills pass history's own dates."""

    scope: Scope
    messages: list[MessageIn] = Field(min_length=1, max_length=_MAX_MESSAGES)
    metadata: dict[str, Any] = Field(default_factory=dict)
    infer: bool = True
    memory_type: MemoryType | None = None
    prompt: str | None = Field(default=None, max_length=20_000)
    timestamp: AwareDatetime | None = None
    expiration_date: AwareDatetime | None = None
    webhook_url: str | None = Field(default=None, pattern=r"^https?://\S+$", max_length=2_000)
    actor_id: Identifier | None = None

    @field_validator("messages")
    @classmethod
    def _something_to_remember(cls, value: list[MessageIn]) -> list[MessageIn]:
        if not any(m.text().strip() or m.images() for m in value):
            raise ValueError("the messages are empty: no text and no image to remember")
        return value

    @model_validator(mode="after")
    def _procedural_needs_an_agent(self) -> AddRequest:
        if self.memory_type is MemoryType.PROCEDURAL and self.scope.agent_id is None:
            raise ValueError("memory_type procedural_memory needs an agent_id")
        return self

    @field_validator("metadata")
    @classmethod
    def _strip_identity(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Identity comes from the scope only: ids inside metadata are dropped."""
        check_metadata(value)
        return {k: v for k, v in value.items() if k not in _IDENTITY_KEYS}

    def extracts_facts(self) -> bool:
        """Whether an LLM extracts facts from this conversation: ``infer`` on and any memory
        type but procedural (semantic and episodic ones too). Those jobs, and only those, are
        shown the scope's existing memories; procedural ones are one summary, infer=False ones
        are stored verbatim."""
        return self.infer and self.memory_type is not MemoryType.PROCEDURAL

    def job_id(self) -> str:
        """Deterministic job id: the same conversation posted twice is the same job."""
        payload = self.model_dump_json(
            include={"scope", "messages", "timestamp", "infer", "memory_type", "prompt"}
        )
        return str(uuid.uuid5(NAMESPACE, "job\x1f" + payload))


_IDENTITY_KEYS = frozenset({"user_id", "agent_id", "run_id", "tenant"})
METADATA_MAX_DEPTH = 8
METADATA_MAX_KEYS = 500
METADATA_MAX_BYTES = 64_000


def check_metadata(metadata: dict[str, Any]) -> None:
    """Bounded metadata: at most 8 levels, 500 keys in all, 64 kB as JSON; keys are
    non-empty strings without a leading '_' or a dot at an edge. Raises ValueError naming the
    limit."""
    keys = 0
    stack: list[tuple[Any, int]] = [(metadata, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > METADATA_MAX_DEPTH:
            raise ValueError(f"metadata is nested deeper than {METADATA_MAX_DEPTH} levels")
        if isinstance(node, dict):
            keys += len(node)
            _check_keys(node)
            stack += [
                (child, depth + 1) for child in node.values() if isinstance(child, dict | list)
            ]
        elif isinstance(node, list):
            stack += [(child, depth + 1) for child in node if isinstance(child, dict | list)]
    if keys > METADATA_MAX_KEYS:
        raise ValueError(f"metadata has {keys} keys; at most {METADATA_MAX_KEYS}")
    if len(json.dumps(metadata, default=str)) > METADATA_MAX_BYTES:
        raise ValueError(f"metadata is larger than {METADATA_MAX_BYTES} bytes as JSON")


def _check_keys(node: dict[Any, Any]) -> None:
    for key in node:
        if not isinstance(key, str) or not key or key != key.strip(".") or key.startswith("_"):
            raise ValueError(
                f"metadata key {key!r} is empty, starts with '_' or has a dot at an edge"
            )


class Fact(_Model):
    """A fact extracted from a conversation, on its way to becoming a memory."""

    text: str
    attributed_to: Literal["user", "assistant"] = "user"
    related_ids: tuple[str, ...] = ()
    # the stored memories this fact makes untrue (same subject and attribute, a new value)
    replaces_ids: tuple[str, ...] = ()
    role: str = "user"
    actor_id: str | None = None
    # Verbatim memories (infer=false): the message's place among the job's turns, so that a
    # search can bring the reply to a turn with it. None for extracted facts.
    turn: int | None = None
    # Provenance: the places (``seq``) in the job's request of the messages it came from: the
    # message itself for a verbatim memory; every message the LLM read as new for an
    # extracted or procedural one (the earlier context is shown to it, not extracted from).
    source_seqs: tuple[int, ...] = ()


class ExistingMemory(_Model):
    """A stored memory shown to the LLM as a small integer."""

    id: str
    text: str


class ContextMessage(_Model):
    role: str
    content: str
    name: str | None = None


def md5_hex(text: str) -> str:
    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def memory_id(scope: Scope, text_hash: str) -> str:
    """uuid5 of scope + normalized-text hash: one fact, one document, however often written."""
    return str(uuid.uuid5(NAMESPACE, f"memory\x1f{scope.key}\x1f{text_hash}"))


def fallback_memory_id(job_id: str, text_hash: str) -> str:
    """Used when the natural id is taken by a memory whose text was later edited."""
    return str(uuid.uuid5(NAMESPACE, f"memory\x1fjob\x1f{job_id}\x1f{text_hash}"))


def history_id(memory: str, event: str, job_id: str, other: str = "") -> str:
    """One row per memory, event and job (and ``other`` memory, for an event that names one:
    a job's two facts may each replace the same memory)."""
    tail = f"\x1f{other}" if other else ""
    return str(uuid.uuid5(NAMESPACE, f"history\x1f{memory}\x1f{event}\x1f{job_id}{tail}"))


def entity_id(scope: Scope, normalized: str) -> str:
    return str(uuid.uuid5(NAMESPACE, f"entity\x1f{scope.key}\x1f{normalized}"))


def message_id(job_id: str, seq: int) -> str:
    return str(uuid.uuid5(NAMESPACE, f"message\x1f{job_id}\x1f{seq}"))


class MemoryView(BaseModel):
    """A stored memory as callers see it (no vector, no internal fields)."""

    id: str
    memory: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    actor_id: str | None = None
    role: str | None = None
    memory_type: str | None = None
    attributed_to: str | None = None
    hash: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    observed_at: datetime | None = None
    expiration_date: datetime | None = None
    # validity (pipeline.domain.validity): set only on a memory a newer one replaced; it was true
    # from observed_at until valid_until
    valid_until: datetime | None = None
    replaced_by: list[str] | None = None
    replaces: list[str] | None = None
    # a caller's verdict on it (pipeline.features.platform.Feedback), recorded only
    feedback: str | None = None
    feedback_reason: str | None = None

    @classmethod
    def from_source(cls, memory_id: str, source: dict[str, Any], **extra: Any) -> Self:
        """From an Elasticsearch ``_source`` (its ``text`` becomes ``memory``)."""
        fields = {k: v for k, v in source.items() if k in VIEW_SOURCE_FIELDS and k != "text"}
        return cls(id=memory_id, memory=source.get("text", ""), **fields, **extra)

    @classmethod
    def from_record(cls, record: ViewSource, **extra: Any) -> Self:
        """From a memory read by id (``pipeline.store.reads.MemoryRecord``)."""
        return cls.from_source(record.id, record.view_fields(), **extra)


class ViewSource(Protocol):
    """A memory read by id, as a view is made from it: its id and the ``_source`` fields of
    ``VIEW_SOURCE_FIELDS`` it has (the store's read model; the domain does not import it)."""

    @property
    def id(self) -> str: ...

    def view_fields(self) -> dict[str, Any]: ...


VIEW_SOURCE_FIELDS = (
    "text",
    "user_id",
    "agent_id",
    "run_id",
    "actor_id",
    "role",
    "memory_type",
    "attributed_to",
    "hash",
    "metadata",
    "created_at",
    "updated_at",
    "observed_at",
    "expiration_date",
    "valid_until",
    "replaced_by",
    "replaces",
    "feedback",
    "feedback_reason",
)
"""The ``_source`` fields a ``MemoryView`` is built from: what reads ask Elasticsearch for."""
