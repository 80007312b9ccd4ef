"""Replies of the scripted model: the facts an extraction prompt would get."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


def facts_reply(request: dict[str, Any]) -> str:
    """One fact per user line of the new messages, in the shape the extraction prompt asks for."""
    new = request["messages"][-1]["content"].split("New messages:", 1)[-1]
    said = re.findall(r"^user[^:]*: (.+)$", new, flags=re.MULTILINE)
    facts = [{"text": f"The user said: {line}", "attributed_to": "user"} for line in said]
    return json.dumps({"memory": facts})


MEMQ_MARK = "You maintain the long-term memory"  # pipeline/ingestion/prompts/extract_user_v1.txt


MEM0_MARK = "You are a Memory Extractor"  # mem0.configs.prompts.ADDITIVE_EXTRACTION_PROMPT


MAX_FACTS = 3


@dataclass
class Responder:
    """Answers memq's and mem0's extraction prompts; counts which prompt it got."""

    kinds: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> str:
        text = "\n".join(str(m.get("content", "")) for m in request["messages"])
        # The last marker: each system prompt also names the section in its instructions.
        if MEM0_MARK in text:
            kind, new = "mem0", text.rpartition("## New Messages")[2].split("## Observation")[0]
        elif MEMQ_MARK in text:
            kind, new = "memq", text.rpartition("New messages:")[2]
        else:
            kind, new = "unknown", ""
        with self.lock:
            self.kinds[kind] += 1
        return json.dumps({"memory": facts(new)})


def facts(new_messages: str) -> list[dict[str, str]]:
    """One fact per user line (at most MAX_FACTS); the shape both prompts ask for."""
    said = re.findall(r"^user[^:\n]*: (.+)$", new_messages, flags=re.MULTILINE)[:MAX_FACTS]
    return [{"text": f"The user said: {line.strip()}", "attributed_to": "user"} for line in said]
