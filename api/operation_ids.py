"""Stable, readable OpenAPI operation ids, so generated clients get method names such as
``add_memories`` and ``search_memories`` instead of FastAPI's ``add_memories_v1_memories_post``.

An operation's id is its handler's name, prefixed ``mem0_`` on mem0's wire contract (whose
handlers are named after the ``mem0ai`` client's methods), unless ``RENAMED`` gives a clearer
one. ``tests/unit/test_openapi.py`` checks that every id is unique and reads as a name.
"""

from __future__ import annotations

from fastapi.routing import APIRoute

MEM0_TAG = "mem0 compatibility"

# handler name -> operation id, where the handler's own name says less than it should
RENAMED = {
    "get_all": "list_memories",
    "delete_scope": "delete_all_memories",
    "search": "search_memories",
    "search_batch": "search_memories_batch",
    "history": "get_memory_history",
    "webhook_secret": "get_webhook_secret",
    "slack": "slack_webhook",
    "telegram": "telegram_webhook",
    "generic": "generic_webhook",
    "export": "export_memories",
}
MEM0_RENAMED = {"delete_everything": "delete_all"}


def operation_id(route: APIRoute) -> str:
    """The operation id of ``route`` (see the module's docstring)."""
    if MEM0_TAG in route.tags:
        return f"mem0_{MEM0_RENAMED.get(route.name, route.name)}"
    return RENAMED.get(route.name, route.name)
