"""A dump's lines are made from typed reads, and write back what was stored, byte for byte."""

from __future__ import annotations

import json

from pipeline.features.export import entity_line, history_line, message_line
from pipeline.store.reads import DumpedEntity, DumpedHistoryRow, DumpedMessage

STORED_AT = "2026-05-01T14:03:07.250000Z"  # not re-spelt as +00:00


def dumped(line: dict[str, object]) -> str:
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def test_an_entity_line_keeps_its_vector_only_when_the_read_carried_one() -> None:
    source = {"text": "Ana", "normalized": "ana", "type": "person", "embedding": [1, 0.25]}
    assert dumped(entity_line(DumpedEntity.from_source("e1", source))) == (
        '{"id":"e1","text":"Ana","normalized":"ana","type":"person","embedding":[1,0.25]}'
    )
    untyped = DumpedEntity.from_source("e2", {"text": "Porto", "normalized": "porto"})
    assert dumped(entity_line(untyped)) == (
        '{"id":"e2","text":"Porto","normalized":"porto","type":""}'
    )


def test_a_message_line_keeps_the_fields_it_has_in_the_dump_order() -> None:
    source = {
        "tenant": "acme",
        "seq": 0,
        "job_id": "j1",
        "created_at": STORED_AT,
        "content": "My sister Ana lives in Lisbon",
        "role": "user",
        "name": None,
    }
    assert dumped(message_line(DumpedMessage.from_source("j1:0", source))) == (
        '{"id":"j1:0","role":"user","content":"My sister Ana lives in Lisbon",'
        f'"created_at":"{STORED_AT}","job_id":"j1","seq":0}}'
    )


def test_a_history_line_keeps_a_blank_job_id_and_leaves_out_the_tenant() -> None:
    source = {
        "tenant": "acme",
        "memory_id": "m1",
        "event": "UPDATE",
        "job_id": "",
        "old": "likes tea",
        "new": "likes coffee",
        "created_at": STORED_AT,
    }
    row = DumpedHistoryRow.from_source("h1", source)
    assert row.memory_id == "m1"
    assert dumped(history_line(row)) == (
        '{"id":"h1","event":"UPDATE","job_id":"","created_at":"' + STORED_AT + '",'
        '"old":"likes tea","new":"likes coffee"}'
    )
