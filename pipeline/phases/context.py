"""Phase 0: the session's last messages, from the shared ``messages`` index."""

from __future__ import annotations

from pipeline.deps import Deps
from pipeline.state import JobState


def collect_context(state: JobState, deps: Deps) -> JobState:
    """Load the scope's message window (oldest first) as context for extraction."""
    window = deps.store.recent_messages(state.request.scope, deps.limits.context_messages)
    return state.with_(context=window)
