"""Text that cannot be stored, refused where it arrives.

JSON lets a body spell a lone UTF-16 surrogate (``"\\ud800"``); Python decodes it into a
string that no UTF-8 encoder accepts, so it would fail deep inside (the store, the embedder,
the job state) as a 500. ``unicode_body`` refuses such a body with 422 naming the field, for
the routers that take JSON; the chat webhooks check their events with
``refuse_lone_surrogates``. Query strings and paths cannot carry one (they are decoded from
UTF-8 with replacement), nor can MCP calls (the MCP layer's JSON parser refuses the escape
with a JSON-RPC parse error before any tool runs).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Depends, Request

from pipeline.errors import InvalidInputError

# a \uD800-\uDFFF escape, the only way a JSON body spells a surrogate (a raw one is not UTF-8)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """The dotted path of the first string (key or value) in ``value`` holding a lone
    surrogate, ``path`` itself for a bad top-level string; None when every string is valid
    Unicode. Walks with a stack of its own, so any depth is safe."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str) and not encodable(node):
            return where
        if isinstance(node, dict):
            for key, child in node.items():
                at = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and not encodable(key):
                    return where or "body"
                stack.append((child, at))
        elif isinstance(node, list):
            stack += [(child, f"{where}.{i}" if where else str(i)) for i, child in enumerate(node)]
    return None


def encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def refuse_lone_surrogates(value: Any, path: str = "") -> None:
    """``InvalidInputError`` naming the field when ``value`` holds a lone surrogate."""
    where = lone_surrogate_at(value, path)
    if where is not None:
        raise InvalidInputError(
            f"{where or 'body'}: the text holds a lone UTF-16 surrogate (such as \\ud800), "
            "which is not a character: send valid Unicode",
            field=where or "body",
        )


async def unicode_body(request: Request) -> None:
    """A router dependency: a JSON body that spells a surrogate escape is parsed (once: the
    route reads the same parse) and refused when one stands alone; other bodies cost a scan."""
    body = await request.body()
    if not _SURROGATE_ESCAPE.search(body):
        return
    try:
        parsed = await request.json()
    except ValueError:
        return  # not JSON: the route's own parsing answers
    refuse_lone_surrogates(parsed)


UnicodeBody = Depends(unicode_body)
