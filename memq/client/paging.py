"""Listings walked page by page as they are consumed: ``Pager`` for ``Client``,
``AsyncPager`` for ``AsyncClient``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from memq.types import Job, JobPage, Memory, MemoryPage

ItemT_co = TypeVar("ItemT_co", covariant=True)
PageT = TypeVar("PageT", bound="_Page[Any]")


class _Page(Protocol[ItemT_co]):
    """What a pager reads of a page: its items and the cursor of the next."""

    @property
    def results(self) -> Sequence[ItemT_co]: ...

    @property
    def next_cursor(self) -> str | None: ...


class Pager(Generic[ItemT_co, PageT]):
    """Every item of a listing, fetched page by page as it is consumed: iterate it for the
    items, or call ``pages()`` for the page objects themselves. Each iteration starts again
    from the first page; errors are raised during iteration."""

    def __init__(self, fetch: Callable[[str | None], PageT]) -> None:
        self._fetch = fetch

    def pages(self) -> Iterator[PageT]:
        """The pages in order, until one has no ``next_cursor`` (or no results)."""
        cursor: str | None = None
        while True:
            page = self._fetch(cursor)
            yield page
            cursor = page.next_cursor
            if not cursor or not page.results:
                return

    def __iter__(self) -> Iterator[ItemT_co]:
        for page in self.pages():
            yield from page.results


class AsyncPager(Generic[ItemT_co, PageT]):
    """``Pager`` for ``AsyncClient``: ``async for item in pager``, or
    ``async for page in pager.pages()``."""

    def __init__(self, fetch: Callable[[str | None], Awaitable[PageT]]) -> None:
        self._fetch = fetch

    async def pages(self) -> AsyncIterator[PageT]:
        """See ``Pager.pages``."""
        cursor: str | None = None
        while True:
            page = await self._fetch(cursor)
            yield page
            cursor = page.next_cursor
            if not cursor or not page.results:
                return

    async def _items(self) -> AsyncIterator[ItemT_co]:
        async for page in self.pages():
            for item in page.results:
                yield item

    def __aiter__(self) -> AsyncIterator[ItemT_co]:
        return self._items()


MemoryPager = Pager[Memory, MemoryPage]
AsyncMemoryPager = AsyncPager[Memory, MemoryPage]
JobPager = Pager[Job, JobPage]
AsyncJobPager = AsyncPager[Job, JobPage]
