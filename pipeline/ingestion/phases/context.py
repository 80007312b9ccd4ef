"""Phase 0: the session's last messages, from the shared ``messages`` index."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.domain.state import JobState
from pipeline.ingestion.batch import shared, single
from pipeline.ingestion.deps import Deps


def collect_context_of(states: Sequence[JobState], deps: Deps) -> list[JobState]:
    """Load each scope's message window (oldest first) as context for extraction: one read for
    the whole batch."""
    windows = deps.store.recent_messages_many(
        [state.request.scope for state in states], deps.limits.context_messages
    )
    return [state.with_(context=window) for state, window in zip(states, windows, strict=True)]


collect_context_batch = shared(collect_context_of)
collect_context = single(collect_context_batch)
