"""What a client could do at best against a provider model, whatever its own costs: bounds a run's
rate is compared with, by simulation of the model's latencies."""

from __future__ import annotations

import heapq
import random
import statistics
from collections import Counter, deque

from benchlib.conversations import Conversation
from benchlib.model import Provider


def order_bound(convs: list[Conversation], model: Provider, trials: int = 2_000) -> str:
    """The best a client can do on these conversations under ``model``, whatever its own costs,
    by simulation of the model's latencies (their expected value over ``trials`` draws):
    - session order alone: the run lasts at least as long as its longest user's chain of
      model calls, one after another (the provider's in-flight limit ignored);
    - session order and the provider's limit together: a client that starts a call the moment
      a slot is free and a user's next conversation may start (first ready, first served, the
      latencies unknown in advance) and spends no time of its own between calls.
    The provider's ceiling, ``limit / mean``, is a rate over a long run: a finite run also
    waits for its last calls, so even the second bound lies below it."""
    rng = random.Random(model.seed)
    per_user = Counter(conv.user for conv in convs)
    chains = list(per_user.values())
    longest = statistics.fmean(
        max(sum(model.latency(rng) for _ in range(n)) for n in chains) for _ in range(trials)
    )
    served = statistics.fmean(limited_run(chains, model, rng) for _ in range(trials))
    count, ceiling = len(convs), model.ceiling
    return (
        f"session order: {len(per_user)} users, at most {max(chains)} conversations each, run "
        f"in order; the longest user's chain of model calls lasts {longest:.1f} s on average, so "
        f"at most {count / longest:.2f} conversations/s ({count / longest / ceiling:.0%} of the "
        f"provider's ceiling, {ceiling:.1f}/s); with at most {model.limit} calls in flight "
        f"besides, a client with no costs of its own takes {served:.1f} s: at most "
        f"{count / served:.2f} conversations/s ({count / served / ceiling:.0%} of the ceiling)"
    )


def limited_run(chains: list[int], model: Provider, rng: random.Random) -> float:
    """One draw of how long users with ``chains`` conversations each take through a provider
    that holds ``model.limit`` calls at once, each user's calls one after another."""
    left = list(chains)
    ready = deque(user for user, n in enumerate(chains) if n)
    ends: list[tuple[float, int]] = []
    now = 0.0
    while ready or ends:
        while ready and len(ends) < model.limit:
            user = ready.popleft()
            left[user] -= 1
            heapq.heappush(ends, (now + model.latency(rng), user))
        now, user = heapq.heappop(ends)
        if left[user]:
            ready.append(user)
    return now
