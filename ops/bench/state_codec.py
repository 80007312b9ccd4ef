"""What a job's state costs on its way through Redis: its JSON size and the time to write and
read it, with the fact vectors as base64 float32 (memq's form) against lists of JSON floats
(the earlier form). No services needed.

    .venv/bin/python ops/bench/state_codec.py [--facts 10] [--repeat 2000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime

from pydantic import Field

from pipeline.domain.models import AddRequest, Fact, MessageIn, Scope
from pipeline.domain.state import JobState


class FloatState(JobState):
    """The earlier form: vectors as lists of JSON floats."""

    embeddings: list[list[float] | None] = Field(default_factory=list)


def state(facts: int, dims: int = 384) -> JobState:
    rng = random.Random(7)
    return JobState(
        job_id="j" * 32,
        request=AddRequest(
            scope=Scope(tenant="t", user_id="u"),
            messages=[
                MessageIn.model_validate(
                    {"role": "user", "content": "I moved to Lisbon last spring. " * 8}
                )
            ]
            * 6,
        ),
        received_at=datetime(2026, 11, 30, tzinfo=UTC),
        facts=[Fact(text=f"The user moved to Lisbon ({i})") for i in range(facts)],
        embeddings=[[rng.uniform(-0.2, 0.2) for _ in range(dims)] for _ in range(facts)],
        lemmas=[f"the user move to lisbon {i}" for i in range(facts)],
        hashes=[f"{i:032x}" for i in range(facts)],
    )


def timed(repeat: int, run: object) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        run()  # type: ignore[operator]
    return (time.perf_counter() - started) / repeat * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--facts", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args(argv)
    job = state(args.facts)
    binary = job.model_dump_json()
    old = FloatState.model_validate(job.model_dump())
    floats = old.model_dump_json()
    print("| vectors as | JSON bytes | write µs | read µs |")
    print("|---|---|---|---|")
    write_b = timed(args.repeat, job.model_dump_json)
    read_b = timed(args.repeat, lambda: JobState.model_validate_json(binary))
    print(f"| base64 float32 | {len(binary)} | {write_b:.0f} | {read_b:.0f} |")
    write_f = timed(args.repeat, old.model_dump_json)
    read_f = timed(args.repeat, lambda: FloatState.model_validate_json(floats))
    print(f"| JSON floats | {len(floats)} | {write_f:.0f} | {read_f:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
