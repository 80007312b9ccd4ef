"""The chat intake's rules over a memory buffer and the intake's memory stores: an event is
buffered once however often the platform retries it and one flush is scheduled per burst; a
flush waits while the burst goes on, then makes one job of it and drops only what it took; an
unusable event never sinks its burst-mates; with the buffer unreachable an event becomes a job
of its own, once. The same paths against Redis, the broker and a live worker are the
integration tests' (``test_chat.py``, ``test_intake_outages.py``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from pipeline.domain.models import AddRequest
from pipeline.errors import TransientError
from pipeline.features.chat import ChatEvent
from tests.unit.test_intake_rules import intake_over
from tests.unit.test_scheduler_flow import NOW, World, make_world
from workers.chat import ChatParts, accept_event, flush
from workers.names import CHAT_FLUSH_TASK
from workers.scheduler.state_store import Lane


@dataclass
class MemoryBuffer:
    """``workers.chat.Buffer`` in memory; ``down`` plays Redis unreachable."""

    events: dict[str, list[ChatEvent]] = field(default_factory=dict)
    last: dict[str, datetime] = field(default_factory=dict)
    scheduled: set[str] = field(default_factory=set)
    seen: set[tuple[str, str]] = field(default_factory=set)
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise TransientError("Redis unreachable (ConnectionError)")

    def first_time(self, event: ChatEvent) -> bool:
        self._check()
        key = (event.platform, event.event_id)
        fresh = key not in self.seen
        self.seen.add(key)
        return fresh

    def push(self, event: ChatEvent, now: datetime, limit: int) -> bool:
        self._check()
        burst = self.events.setdefault(event.conversation, [])
        burst.append(event)
        del burst[:-limit]
        self.last[event.conversation] = now
        fresh = event.conversation not in self.scheduled
        self.scheduled.add(event.conversation)
        return fresh

    def peek_if_quiet(
        self, conversation: str, quiet_s: float, now: datetime
    ) -> list[ChatEvent] | float:
        self._check()
        left = (self.last[conversation] + timedelta(seconds=quiet_s) - now).total_seconds()
        return left if left > 0 else list(self.events.get(conversation, []))

    def drop(self, conversation: str, count: int) -> int:
        self._check()
        rest = self.events.get(conversation, [])[count:]
        self.events[conversation] = rest
        if not rest:
            self.scheduled.discard(conversation)
        return len(rest)


@dataclass
class Sender:
    """The tasks sent, as (name, args, countdown)."""

    sent: list[tuple[str, tuple[Any, ...] | None, float | None]] = field(default_factory=list)

    def send_task(
        self,
        name: str,
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        countdown: float | None = None,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> None:
        self.sent.append((name, args, countdown))


@dataclass
class Chat:
    parts: ChatParts
    buffer: MemoryBuffer
    sender: Sender
    world: World
    now: list[datetime]

    def later(self, seconds: float) -> None:
        self.now[0] += timedelta(seconds=seconds)

    def flushes(self) -> list[tuple[Any, ...] | None]:
        return [args for name, args, _ in self.sender.sent if name == CHAT_FLUSH_TASK]

    def ready(self) -> list[str]:
        return list(self.world.states.ready.get(Lane.LIVE, []))

    def job(self, job_id: str | None) -> AddRequest:
        """The request of a job accepted (recorded, and queued in its line)."""
        assert job_id is not None and self.world.records.get_job(job_id) is not None
        state = self.world.states.load(job_id)
        assert state is not None
        return state.request


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch) -> Chat:
    for key in list(os.environ):
        if key.startswith("MEMQ_") or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)
    monkeypatch.setenv("MEMQ_LLM_BASE_URL", "http://127.0.0.1:11434/v1")  # an LLM is configured
    monkeypatch.setenv("MEMQ_CHAT_DEBOUNCE_S", "5")
    world, buffer, sender, now = make_world(), MemoryBuffer(), Sender(), [NOW]
    intake = intake_over(world, world.records, clock=lambda: now[0])
    return Chat(ChatParts(buffer, intake, sender), buffer, sender, world, now)


def said(event_id: str, content: str, conversation: str = "C1", user: str = "alice") -> ChatEvent:
    return ChatEvent(
        platform="slack",
        event_id=event_id,
        conversation=conversation,
        user_id=user,
        run_id=conversation,
        role="user",
        name=None,
        content=content,
        at=NOW,
    )


def test_a_burst_is_buffered_once_with_one_flush_scheduled_after_the_debounce(
    chat: Chat,
) -> None:
    assert accept_event(chat.parts, said("e1", "I moved to Berlin"))
    assert accept_event(chat.parts, said("e2", "in March"))
    assert not accept_event(chat.parts, said("e1", "I moved to Berlin"))  # the platform's retry
    assert [e.event_id for e in chat.buffer.events["C1"]] == ["e1", "e2"]
    assert chat.sender.sent == [(CHAT_FLUSH_TASK, ("C1",), 5.0)]
    assert chat.ready() == []  # no job yet: the burst may go on


def test_a_flush_waits_while_the_burst_goes_on_then_makes_one_job_of_it(chat: Chat) -> None:
    accept_event(chat.parts, said("e1", "I moved to Berlin"))
    chat.later(2)
    accept_event(chat.parts, said("e2", "in March"))
    early = flush(chat.parts, "C1")
    assert early.job_id is None and early.wait_s == pytest.approx(5.0)
    chat.later(5)
    done = flush(chat.parts, "C1")
    assert done.job_id is not None and done.wait_s is None
    request = chat.job(done.job_id)
    assert [m.content for m in request.messages] == ["I moved to Berlin", "in March"]
    assert request.scope.user_id == "alice" and request.infer
    assert chat.ready() == [done.job_id]
    assert chat.buffer.events["C1"] == []
    assert len(chat.flushes()) == 1  # nothing came meanwhile: no flush follows


def test_a_flush_run_twice_makes_the_same_job(chat: Chat) -> None:
    accept_event(chat.parts, said("e1", "I moved to Berlin"))
    chat.later(6)
    taken = chat.buffer.events["C1"][:]
    first = flush(chat.parts, "C1")
    chat.buffer.events["C1"] = taken  # the flush died after its job, before the drop
    again = flush(chat.parts, "C1")
    assert first.job_id == again.job_id
    assert chat.ready() == [first.job_id]


def test_events_that_arrive_during_a_flush_wait_for_a_flush_of_their_own(chat: Chat) -> None:
    accept_event(chat.parts, said("e1", "I moved to Berlin"))
    chat.later(6)
    late = said("e2", "and I work at a bakery")
    real_drop = chat.buffer.drop

    def drop_after_a_late_event(conversation: str, count: int) -> int:
        chat.buffer.events[conversation].append(late)  # pushed between the read and the drop
        return real_drop(conversation, count)

    chat.buffer.drop = drop_after_a_late_event  # type: ignore[method-assign]
    done = flush(chat.parts, "C1")
    assert [e.event_id for e in chat.buffer.events["C1"]] == ["e2"]
    assert len(chat.flushes()) == 2  # the first burst's, and one for what came meanwhile
    assert [m.content for m in chat.job(done.job_id).messages] == ["I moved to Berlin"]


def test_an_unusable_event_is_dropped_without_its_burst_mates(chat: Chat) -> None:
    accept_event(chat.parts, said("e1", "I moved to Berlin"))
    chat.buffer.events["C1"].append(said("e0", ""))  # buffered before arrival checks existed
    chat.later(6)
    done = flush(chat.parts, "C1")
    assert [m.content for m in chat.job(done.job_id).messages] == ["I moved to Berlin"]
    assert chat.buffer.events["C1"] == []


def test_with_the_buffer_unreachable_an_event_is_a_job_of_its_own_once(chat: Chat) -> None:
    chat.buffer.down = True
    assert accept_event(chat.parts, said("e1", "I moved to Berlin"))
    assert not accept_event(chat.parts, said("e1", "I moved to Berlin"))  # the platform retries
    assert chat.sender.sent == []
    [job] = chat.ready()
    assert [m.content for m in chat.job(job).messages] == ["I moved to Berlin"]
