"""memq's one exception tree, classified by what the caller does next.

- ``TransientError``: worth retrying with backoff (Elasticsearch 429/5xx or unreachable, Redis down,
  an LLM timeout or rate limit). Retried at exactly one layer per failure.
- ``PermanentError``: retrying cannot help (invalid input, a model reply that stays unusable after
  repair, a mapping conflict). The job ends ``failed`` with ``reason``.

Lower libraries' exceptions are translated into this tree once, at the adapter that calls them
(``raise ... from exc``), so callers never catch ``elasticsearch`` or ``openai`` types.
"""

from __future__ import annotations


class MemqError(Exception):
    """Base of every error memq raises on purpose."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientError(MemqError):
    """A failure that may pass: retry with backoff. ``throttled``: the server refused for load
    (429); ``retry_after_s`` is its own word on when to come back, when it gave one."""

    def __init__(
        self, reason: str, retry_after_s: float | None = None, throttled: bool = False
    ) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s
        self.throttled = throttled


class UnreachableError(TransientError):
    """The service could not be reached at all (connection refused or reset). Not
    retried at the call: the task layer retries it against the deadline, so an outage of
    minutes costs a wait, not the job."""


class EmbedderChangedError(TransientError):
    """A vector of another size than the index holds: the index moved to a new embedder
    (``memq reprocess --reembed``) since this process embedded. The caller asks its embedder
    to read the index's again and embeds anew (``pipeline.adapters.embedding.versioned``)."""


class PermanentError(MemqError):
    """A failure that will not pass by retrying: fail the job with ``reason``."""


class InvalidInputError(PermanentError):
    """The caller's input is wrong; ``field`` names the offending key when there is one."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(reason)
        self.field = field


class ConflictError(InvalidInputError):
    """The input is sound but the state refuses it now (a run already active, a version
    already in use): the caller waits, or asks for something else."""


class NotFoundError(PermanentError):
    """No such thing for this caller (absent, or another tenant's: the two look the same)."""


class NotServedError(PermanentError):
    """A call memq understands but does not serve (a part of mem0's platform with no meaning
    here, or one that would need a model call per read): ``reason`` says why and what instead."""


class ConfigurationError(PermanentError):
    """memq is configured in a way that cannot work (wrong dims, unreachable model file...)."""


class RetriesExhaustedError(MemqError):
    """A transient failure that was already retried at the call layer (e.g. the LLM adapter's
    own backoff) and still failed. Not retried again by the task layer: the job ends ``dead``,
    listed for replay, with ``reason``."""


class WorkerLostError(RetriesExhaustedError):
    """The job's worker died (killed, out of memory, over its time limit) every time it ran
    one of its phases, ``max_deliveries`` times: the job ends ``dead`` with ``reason`` rather
    than taking more workers down with it."""
