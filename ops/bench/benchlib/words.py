"""Synthetic sentences from a small vocabulary, for memories whose words do not matter."""

from __future__ import annotations

import random

WORDS = [
    "tea",
    "coffee",
    "hiking",
    "Lyon",
    "Alps",
    "sister",
    "brother",
    "garden",
    "bees",
    "honey",
    "piano",
    "chess",
    "Tokyo",
    "marathon",
    "recipe",
    "bakery",
    "novel",
    "guitar",
    "kayak",
    "museum",
    "train",
    "winter",
    "summer",
    "project",
    "deadline",
    "meeting",
    "doctor",
    "dentist",
    "birthday",
    "wedding",
    "holiday",
    "camping",
    "bicycle",
    "Paris",
]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + "."
