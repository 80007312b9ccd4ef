"""Synthetic conversations: users telling an assistant about their lives, a few facts each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

CITIES = ["Lisbon", "Porto", "Lyon", "Ghent", "Turin", "Bilbao", "Krakow"]


JOBS = ["nurse", "data analyst", "carpenter", "teacher", "sound engineer"]


PEOPLE = ["Marta", "Jonas", "Aisha", "Tom", "Inés", "Kenji", "Priya", "Luca", "Sofia", "Omar"]


TOPICS = ["bouldering", "jazz piano", "pottery", "chess", "sailing", "sourdough", "cycling"]


PETS = ["beagle", "tabby cat", "rescue greyhound", "parrot", "corgi"]


FOODS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "kiwi"]


BOOKS = ["Middlemarch", "Dune", "The Overstory", "Piranesi", "Stoner", "Beloved", "Solaris"]


# (user line, assistant reply) pairs; {i} keeps every conversation's lines its own.
PAIRS = [
    (
        "I moved to {city} in March for a job as a {job}, flat number {i}.",
        "Congratulations on the move! How are you settling in?",
    ),
    (
        "My sister {person} visits on the {day}th and she is really into {topic}.",
        "Lovely. Do you have plans for her visit?",
    ),
    (
        "I've taken up {topic} again, every Saturday at {hour} in the morning.",
        "That's a great routine. What got you back into it?",
    ),
    (
        "Heads up: I'm allergic to {food}, keep that in mind for recipe {i}.",
        "Noted, I'll avoid {food} in anything I suggest.",
    ),
    (
        "We adopted a {pet} called {person} Junior {i} weeks ago.",
        "How fun! How is the {pet} adjusting?",
    ),
    (
        "I'm rereading {book} for my book club, we meet on the {day}th.",
        "Great choice. What do you think of it this time?",
    ),
    (
        "I'm training for a half marathon in {city}, aiming for 1:{minutes} this time.",
        "Good luck! How many kilometres a week are you running?",
    ),
    (
        "At work as a {job} I'm leading project {i} until the end of the quarter.",
        "That sounds demanding. How is the team?",
    ),
]


@dataclass(frozen=True)
class Conversation:
    id: str
    user: str
    timestamp: datetime
    messages: list[dict[str, str]]


def slots(i: int) -> dict[str, Any]:
    return {
        "i": i,
        "city": CITIES[i % len(CITIES)],
        "job": JOBS[i % len(JOBS)],
        "person": PEOPLE[i % len(PEOPLE)],
        "topic": TOPICS[i % len(TOPICS)],
        "pet": PETS[i % len(PETS)],
        "food": FOODS[i % len(FOODS)],
        "book": BOOKS[i % len(BOOKS)],
        "day": 1 + i % 28,
        "hour": 6 + i % 5,
        "minutes": 40 + i % 20,
    }


def conversation(i: int, users: int, start: datetime) -> Conversation:
    """4 to 8 turns, user first, drawn from the templates at an offset of its own."""
    turns = 4 + i % 5
    values = slots(i)
    messages: list[dict[str, str]] = []
    for k in range(turns):
        user_line, reply = PAIRS[(i + k // 2) % len(PAIRS)]
        role, text = ("user", user_line) if k % 2 == 0 else ("assistant", reply)
        messages.append({"role": role, "content": text.format(**values)})
    stamp = start + timedelta(hours=7 * i)
    return Conversation(f"c{i}", f"user{i % users}", stamp, messages)


def conversations(count: int, users: int = 20) -> list[Conversation]:
    start = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)
    return [conversation(i, users, start) for i in range(count)]
