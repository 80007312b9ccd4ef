"""A round trip of search: searches that do not wait on one another, sent in one msearch and
answered by the key each was added under."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.domain.models import Scope
from pipeline.store.protocol import SearchIndex, ServingStore

Key = tuple[int, str]  # (which query or item, which search of it)


@dataclass
class Round:
    """The searches of one round trip, each under its own key."""

    searches: list[tuple[Key, SearchIndex, Scope | None, dict[str, Any]]] = field(
        default_factory=list
    )

    def add(self, key: Key, index: SearchIndex, scope: Scope | None, body: dict[str, Any]) -> None:
        self.searches.append((key, index, scope, body))

    def run(self, store: ServingStore, what: str, named: bool = False) -> dict[Key, dict[str, Any]]:
        """Every search's full response by its key; no round trip when there is no search."""
        if not self.searches:
            return {}
        responses = store.search_indices(
            [(index, scope, body) for _, index, scope, body in self.searches], what, named
        )
        return {s[0]: r for s, r in zip(self.searches, responses, strict=True)}
