"""An export read whole, for mem0's ``create_memory_export`` / ``get_memory_export``.

mem0 keeps an export request and fills the caller's JSON schema from the memories with a model.
memq makes no model call on a read, so it does not apply the schema: the export is memq's own
dump (``pipeline.features.export``) as one JSON document, read when it is fetched. Nothing is stored
for a request: its id is the selector itself (``export_id``), so any API process can answer it,
and it never reaches beyond the tenant of the key that reads it. A selection larger than
``MAX_EXPORT_MEMORIES`` is refused: ``GET /v1/export`` streams a dump of any size.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.errors import InvalidInputError, NotFoundError
from pipeline.features.export import ExportOptions, Selector, export_lines
from pipeline.store.elastic import ElasticStore

EXPORT_ID_PREFIX = "exp_"
MAX_EXPORT_ID_CHARS = 2048
MAX_EXPORT_MEMORIES = 10_000


def export_id(selector: Selector) -> str:
    """The id naming ``selector`` without its tenant (the reader's key supplies it)."""
    ids = {k: v for k, v in selector.fields().items() if k != "tenant"}
    raw = json.dumps(ids, sort_keys=True, separators=(",", ":")).encode()
    return EXPORT_ID_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def selector_of(tenant: str, given_id: str) -> Selector:
    """The selector an ``export_id`` names, within ``tenant``; ``NotFoundError`` for an id
    memq did not make."""
    missing = NotFoundError(f"no export {given_id[:80]}")
    if not given_id.startswith(EXPORT_ID_PREFIX) or len(given_id) > MAX_EXPORT_ID_CHARS:
        raise missing
    encoded = given_id.removeprefix(EXPORT_ID_PREFIX)
    try:
        ids = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
        if not isinstance(ids, dict) or "tenant" in ids:
            raise missing
        return Selector.model_validate({**ids, "tenant": tenant})
    except (binascii.Error, ValueError, ValidationError):
        raise missing from None


class ExportDocument(BaseModel):
    """An export read whole: its id, the dump's header fields as the dump wrote them, and
    the memories as the dump's memory lines (``pipeline.features.export``), without their
    ``type``."""

    model_config = ConfigDict(frozen=True)

    id: str
    format: str
    version: int
    exported_at: str
    selector: dict[str, str]
    count: int
    memories: list[dict[str, Any]]


def read_export(
    store: ElasticStore, selector: Selector, embedding_model: str, dims: int, now: datetime
) -> ExportDocument:
    """The selected memories, each with its history and entities, as one document.
    ``InvalidInputError`` when more than ``MAX_EXPORT_MEMORIES`` are selected."""
    options = ExportOptions(selector=selector, history=True)
    lines = export_lines(store, options, embedding_model, dims, now)
    header = json.loads(next(lines))
    memories: list[dict[str, Any]] = []
    for raw in lines:
        line = json.loads(raw)
        if line.pop("type") == "end":
            break
        if len(memories) == MAX_EXPORT_MEMORIES:
            lines.close()  # closes the dump's point in time
            raise InvalidInputError(
                f"the export selects more than {MAX_EXPORT_MEMORIES} memories: narrow it by "
                "user_id, agent_id or run_id, or stream it with GET /v1/export",
                field="filters",
            )
        memories.append(line)
    return ExportDocument(
        id=export_id(selector),
        format=header["format"],
        version=header["version"],
        exported_at=header["exported_at"],
        selector=header["selector"],
        count=len(memories),
        memories=memories,
    )
