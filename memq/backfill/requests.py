"""A conversation of an archive as the jobs it becomes (split when it is too long)."""

from __future__ import annotations

import re

from memq.backfill.options import MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_JOB, BackfillOptions
from pipeline.domain.models import AddRequest, MessageIn, Scope
from pipeline.ingestion.backfill.readers import Conversation


def requests_for(
    conversation: Conversation, options: BackfillOptions
) -> list[tuple[str, AddRequest]]:
    """``(idempotency_key, request)`` per job of ``conversation``: one job, or one per 500
    messages. ValueError (pydantic's included) when the conversation is not acceptable."""
    messages = [m for item in conversation.messages for m in _messages_in(item)]
    if not messages:
        raise ValueError("no message with text")
    scope = Scope(
        tenant=options.tenant, user_id=conversation.user_id, agent_id=conversation.agent_id
    )
    chunks = [
        messages[i : i + MAX_MESSAGES_PER_JOB]
        for i in range(0, len(messages), MAX_MESSAGES_PER_JOB)
    ]
    base_key = f"backfill:{options.fmt}:{conversation.key}"
    metadata = {**conversation.metadata, "backfill_key": conversation.key}
    return [
        (
            base_key if index == 0 else f"{base_key}#part{index + 1}",
            AddRequest(
                scope=scope,
                messages=chunk,
                metadata=metadata if len(chunks) == 1 else {**metadata, "part": index + 1},
                infer=options.infer,
                timestamp=conversation.timestamp,
            ),
        )
        for index, chunk in enumerate(chunks)
    ]


def _messages_in(item: dict[str, str]) -> list[MessageIn]:
    content = item.get("content", "")
    name = re.sub(r"\s+", "_", item["name"].strip())[:128] if item.get("name") else None
    pieces = [content[i : i + MAX_MESSAGE_CHARS] for i in range(0, len(content), MAX_MESSAGE_CHARS)]
    return [
        MessageIn.model_validate({"role": item.get("role"), "content": piece, "name": name or None})
        for piece in pieces
        if piece.strip()
    ]
