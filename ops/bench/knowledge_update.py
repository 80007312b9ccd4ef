"""Knowledge updates: does search answer with what is true now? Generated timelines, through
the public API, memq on both paths beside mem0 OSS.

Each person of a set has one timeline per topic (city, job, car, pet, partner, sport, phone,
diet): an earlier statement (2022) and a later one that replaces it (2024), a few unrelated
statements, each said in a session of its own, one ``POST /v1/memories`` per session with the
speaker's name and the session's date. Then questions about the present ("Where does Maria live
now?", or no time at all) and about the past ("Where did Maria live in 2022?").

Two sets are generated: ``dev`` and ``held-out``. They share no template, question form, name
or value, so the held-out set checks the method on timelines nothing was tuned on (the search
settings were chosen on ``dev`` only). Paths:
- ``raw``: ``infer=false``, every message stored as said; no model involved.
- ``extract``: ``infer=true`` with the scripted model (tests/fakellm.py) as the LLM: it writes
  each statement's fact and names the fact it replaces by its text, which the server turns into
  the number the prompt showed it under (so retrieval decides whether the model could see it).
- ``mem0``: mem0 OSS (``mem0.Memory``, ``infer=False``) on the same sessions, run as
  mem0_compare.py runs it (same Elasticsearch, same MiniLM model, no LLM call).

Metrics per question kind: ``current first`` (the statement true at the question's time is the
first of the hits that are either statement), ``stale above`` (the other statement ranks above
it, or it is missing while the other is found), ``top hit`` (it is the very first hit, above
every other memory of the person too), ``found`` (it is among the top 10). Past
questions are asked twice: naming the period only, and with ``as_of`` (memq) inside it. Search
latency is measured side by side on the raw path: two API processes over the same memories,
one with the newer-first rule and one without (``MEMQ_SEARCH_RIVAL_SCORE_RATIO=1``), asked in
turn per question; the machine is shared, so only their ratio means anything.

    .venv/bin/python ops/bench/knowledge_update.py [--people 6] [--port 8312] [--no-mem0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchlib.model import ScriptedModel
from benchlib.stack import Stack, running_stack

from memq.client import Client
from pipeline.domain.jobs import JobStatus

PREFIX = "memqbench-kupdate"
TOP_K = 10
ASKED_AT = datetime(2025, 3, 1, tzinfo=UTC)
OLD_YEAR, NEW_YEAR = 2022, 2024

# -- the two sets: disjoint names, values, templates and questions ------------------------------

Topic = dict[str, Any]

DEV: dict[str, Any] = {
    "names": ["Maria", "Tom", "Aisha", "Lukas", "Mei", "Diego", "Sara", "Omar"],
    "fillers": [
        "I watched a great documentary about whales yesterday.",
        "The weather has been lovely all week.",
        "I finally finished that long novel I was reading.",
        "My sister is visiting us next weekend.",
    ],
    "topics": {
        "city": {
            "values": ["Lisbon", "Berlin", "Toronto", "Osaka", "Nairobi", "Lyon"],
            "old": "I live in {v}, I love it here.",
            "new": "Big news: I moved to {v} last month.",
            "fact": "{n} lives in {v}",
            "now": ["Where does {n} live now?", "Which city does {n} live in?"],
            "past": "Where did {n} live in {y}?",
        },
        "job": {
            "values": ["nurse", "software engineer", "teacher", "chef", "architect", "pilot"],
            "old": "I work as a {v} and I enjoy it.",
            "new": "I started a new job as a {v} this month.",
            "fact": "{n} works as a {v}",
            "now": ["What does {n} do for a living these days?", "What is {n}'s job?"],
            "past": "What was {n}'s job in {y}?",
        },
        "car": {
            "values": ["Toyota Corolla", "Tesla Model 3", "Volvo XC40", "Fiat Panda", "Ford Focus"],
            "old": "I drive a {v} to work every day.",
            "new": "I sold my old car and bought a {v}.",
            "fact": "{n} drives a {v}",
            "now": ["What car does {n} drive currently?", "Which car does {n} have?"],
            "past": "What car did {n} drive in {y}?",
        },
        "pet": {
            "values": ["golden retriever", "tabby cat", "parrot", "rabbit", "beagle"],
            "old": "My pet is a {v} and we go everywhere together.",
            "new": "After our old pet passed away we adopted a {v}.",
            "fact": "{n}'s pet is a {v}",
            "now": ["What pet does {n} have now?", "What kind of pet does {n} have?"],
            "past": "What pet did {n} have in {y}?",
        },
        "partner": {
            "values": ["Alex", "Jordan", "Sam", "Robin", "Chris", "Taylor"],
            "old": "I am dating {v}, we met at a concert.",
            "new": "{o} and I broke up, and now I am seeing {v}.",
            "fact": "{n} is dating {v}",
            "now": ["Who is {n} dating now?", "Who is {n}'s partner?"],
            "past": "Who was {n} dating in {y}?",
        },
        "sport": {
            "values": ["tennis", "football", "climbing", "swimming", "basketball", "rowing"],
            "old": "I play {v} every weekend.",
            "new": "I gave up my old sport and took up {v}.",
            "fact": "{n}'s sport is {v}",
            "now": ["What sport does {n} do currently?", "Which sport does {n} play?"],
            "past": "What sport did {n} play in {y}?",
        },
        "phone": {
            "values": ["iPhone 12", "Pixel 7", "Galaxy S21", "Nokia G50", "Xperia 5"],
            "old": "My phone is a {v}.",
            "new": "I upgraded my phone to a {v}.",
            "fact": "{n}'s phone is a {v}",
            "now": ["What phone does {n} use now?", "Which phone does {n} have?"],
            "past": "What phone did {n} use in {y}?",
        },
        "diet": {
            "values": ["vegetarian", "vegan", "keto", "pescatarian", "paleo"],
            "old": "I follow a {v} diet.",
            "new": "I switched to a {v} diet recently.",
            "fact": "{n} follows a {v} diet",
            "now": ["What diet does {n} follow these days?", "What does {n} eat?"],
            "past": "What diet did {n} follow in {y}?",
        },
    },
}

HELD_OUT: dict[str, Any] = {
    "names": ["Priya", "Jonas", "Elena", "Kwame", "Yuki", "Rafael", "Ingrid", "Hassan"],
    "fillers": [
        "We had friends over for dinner on Saturday.",
        "I have been trying to sleep earlier lately.",
        "The new bakery near the station is excellent.",
        "I spent the afternoon fixing my bike.",
    ],
    "topics": {
        "city": {
            "values": ["Porto", "Vienna", "Melbourne", "Seoul", "Bogota", "Krakow"],
            "old": "Our flat in {v} is small but cosy.",
            "new": "The movers just dropped our boxes at the new apartment in {v}.",
            "fact": "{n} lives in {v}",
            "now": ["In which city is {n} based at the moment?", "Where is {n}'s home?"],
            "past": "Which city was {n} based in during {y}?",
        },
        "job": {
            "values": ["accountant", "electrician", "journalist", "dentist", "data analyst"],
            "old": "My days as an {v} are long but rewarding.",
            "new": "Today was my first day in my new role as a {v}.",
            "fact": "{n} works as a {v}",
            "now": ["What is {n}'s current occupation?", "How does {n} earn a living?"],
            "past": "What was {n}'s occupation during {y}?",
        },
        "car": {
            "values": ["Honda Civic", "BMW i3", "Skoda Octavia", "Mazda 3", "Renault Clio"],
            "old": "The {v} has never let me down on the highway.",
            "new": "I traded in my car for a {v} at the dealership.",
            "fact": "{n} drives a {v}",
            "now": ["Which vehicle is {n} driving nowadays?", "What does {n} drive?"],
            "past": "Which vehicle was {n} driving during {y}?",
        },
        "pet": {
            "values": ["husky", "siamese cat", "hamster", "dachshund", "canary"],
            "old": "Walking my {v} is the best part of my morning.",
            "new": "We brought home a {v} from the shelter, our old pet is gone.",
            "fact": "{n}'s pet is a {v}",
            "now": ["Which animal lives with {n} at present?", "What animal does {n} own?"],
            "past": "Which animal lived with {n} during {y}?",
        },
        "partner": {
            "values": ["Morgan", "Casey", "Jamie", "Avery", "Quinn", "Riley"],
            "old": "{v} and I have been together for two years.",
            "new": "I split from {o}; {v} is my girlfriend now.",
            "fact": "{n} is dating {v}",
            "now": ["Who is {n} in a relationship with at present?", "Who is {n} seeing?"],
            "past": "Who was {n} in a relationship with during {y}?",
        },
        "sport": {
            "values": ["volleyball", "cycling", "boxing", "golf", "yoga", "skiing"],
            "old": "Training for {v} keeps me fit.",
            "new": "I dropped my old training and signed up for {v} classes.",
            "fact": "{n}'s sport is {v}",
            "now": ["Which sport is {n} into right now?", "What sport does {n} practice?"],
            "past": "Which sport was {n} into during {y}?",
        },
        "phone": {
            "values": ["OnePlus 9", "iPhone 14", "Moto G", "Pixel 8", "Galaxy A54"],
            "old": "I take all my photos on my {v}.",
            "new": "My old phone broke so I got a {v}.",
            "fact": "{n}'s phone is a {v}",
            "now": ["Which handset does {n} carry today?", "What mobile does {n} own?"],
            "past": "Which handset did {n} carry during {y}?",
        },
        "diet": {
            "values": ["gluten-free", "low-carb", "Mediterranean", "raw food", "flexitarian"],
            "old": "Eating {v} has done wonders for my energy.",
            "new": "I have changed my eating habits and gone {v}.",
            "fact": "{n} follows a {v} diet",
            "now": ["How is {n} eating at the moment?", "Which diet is {n} on?"],
            "past": "How was {n} eating during {y}?",
        },
    },
}

SETS = {"dev": DEV, "held-out": HELD_OUT}
REPLIES = ["That sounds great!", "Thanks for telling me.", "Good to know!", "I see, noted."]


@dataclass(frozen=True)
class Said:
    """One session: one statement of a person, with its date and the fact it states."""

    person: str
    text: str
    at: datetime
    fact: str
    replaces: str | None = None  # the fact the statement makes untrue


@dataclass(frozen=True)
class Question:
    person: str
    text: str
    current: tuple[str, str]  # (statement, fact) true at the question's time
    stale: tuple[str, str]  # the other one
    kind: str  # now | past
    as_of: datetime | None = None


@dataclass
class Dataset:
    sessions: list[Said] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def generate(spec: dict[str, Any], people: int, seed: int) -> Dataset:
    """A set: ``people`` persons, each with every topic's timeline and the fillers."""
    rng = random.Random(seed)
    data = Dataset()
    for name in spec["names"][:people]:
        for topic in spec["topics"].values():
            timeline(data, rng, name, topic)
        for filler in spec["fillers"]:
            at = day(rng, rng.choice((OLD_YEAR, OLD_YEAR + 1, NEW_YEAR)))
            data.sessions.append(Said(name, filler, at, f"{name} mentioned: {filler}"))
    return data


def timeline(data: Dataset, rng: random.Random, name: str, topic: Topic) -> None:
    old, new = rng.sample(topic["values"], 2)
    said_old = topic["old"].format(v=old, o="", n=name)
    said_new = topic["new"].format(v=new, o=old, n=name)
    fact_old, fact_new = (topic["fact"].format(n=name, v=v) for v in (old, new))
    at_old, at_new = day(rng, OLD_YEAR), day(rng, NEW_YEAR)
    data.sessions += [
        Said(name, said_old, at_old, fact_old),
        Said(name, said_new, at_new, fact_new, replaces=fact_old),
    ]
    now, then = (said_new, fact_new), (said_old, fact_old)
    for question in topic["now"]:
        data.questions.append(Question(name, question.format(n=name), now, then, "now"))
    between = at_old + (at_new - at_old) / 2
    data.questions.append(
        Question(
            name,
            topic["past"].format(n=name, y=OLD_YEAR),
            then,
            now,
            "past",
            as_of=between,
        )
    )


def day(rng: random.Random, year: int) -> datetime:
    return datetime(year, 1, 1, 10, tzinfo=UTC) + timedelta(days=rng.randrange(360))


# -- the scripted model of the extraction path ------------------------------------------------


def oracle(data: Sequence[Said]) -> Callable[[dict[str, Any]], str]:
    """The model: each statement's fact, naming the fact it replaces by its text."""
    facts = {(s.person, s.text): s for s in data}

    def respond(request: dict[str, Any]) -> str:
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        found = [
            said for (person, text), said in facts.items() if f"user ({person}): {text}" in user
        ]
        return json.dumps(
            {
                "memory": [
                    {"text": s.fact, "attributed_to": "user", "related": []}
                    | ({"replaces_text": [s.replaces]} if s.replaces else {})
                    for s in found
                ]
            }
        )

    return respond


# -- ingestion and questions ----------------------------------------------------------------------


def scope_of(set_name: str, path: str, person: str) -> str:
    return f"{set_name}-{path}-{person}".lower()


def ingest(client: Client, set_name: str, path: str, data: Dataset) -> None:
    """One POST per session, every session queued at once (a person's run in order)."""
    jobs = []
    for said in sorted(data.sessions, key=lambda s: s.at):
        jobs.append(
            client.add(
                session_messages(said),
                user_id=scope_of(set_name, path, said.person),
                timestamp=said.at,
                infer=path == "extract",
            )
        )
    for job in jobs:
        done = client.wait_for(job, timeout_s=900)
        if done["status"] != JobStatus.SUCCEEDED:
            raise RuntimeError(f"job {done['job_id']} ended {done['status']}: {done}")


def session_messages(said: Said) -> list[dict[str, str]]:
    """The statement with its speaker's name, and the assistant's short answer."""
    return [
        {"role": "user", "content": said.text, "name": said.person},
        {"role": "assistant", "content": random.Random(said.text).choice(REPLIES)},
    ]


Search = Callable[[Question, bool], list[str]]
"""A question (and whether to pass ``as_of``) → the memory texts found, best first."""


def memq_search(client: Client, set_name: str, path: str) -> Search:
    def search(question: Question, as_of: bool) -> list[str]:
        hits = client.search(
            question.text,
            user_id=scope_of(set_name, path, question.person),
            top_k=TOP_K,
            reference_time=ASKED_AT,
            as_of=question.as_of if as_of else None,
        )
        return [h.memory for h in hits]

    return search


@dataclass
class Tally:
    asked: int = 0
    first: int = 0
    stale_above: int = 0
    found: int = 0
    top: int = 0  # the current statement is the very first hit
    misses: list[str] = field(default_factory=list)  # the questions not answered first

    def add(self, question: str, hits: list[str], current: str, stale: str) -> None:
        self.asked += 1
        rank = {text: i for i, text in reversed(list(enumerate(hits)))}
        mine, other = rank.get(current), rank.get(stale)
        self.found += mine is not None
        self.top += mine == 0
        first = mine is not None and (other is None or mine < other)
        self.first += first
        self.stale_above += other is not None and (mine is None or other < mine)
        if not first:
            self.misses.append(f"{question} -> {hits[:3]}")

    def share(self, count: int) -> str:
        return f"{100 * count / max(self.asked, 1):.1f}%"

    def row(self) -> str:
        counts = (self.first, self.stale_above, self.top, self.found)
        return " | ".join(self.share(n) for n in counts)


def evaluate(search: Search, data: Dataset, path: str, as_of: bool) -> dict[str, Tally]:
    """Per kind (``now``, ``past``, and ``past as_of`` when asked), the tallies."""
    tallies: dict[str, Tally] = {}
    column = 1 if path == "extract" else 0
    for question in data.questions:
        kinds = [question.kind] + (["past as_of"] if as_of and question.kind == "past" else [])
        for kind in kinds:
            hits = search(question, kind == "past as_of")
            tally = tallies.setdefault(kind, Tally())
            tally.add(question.text, hits, question.current[column], question.stale[column])
    return tallies


# -- mem0 OSS -------------------------------------------------------------------------------------


def mem0_run(sets: dict[str, Dataset]) -> dict[str, dict[str, Tally]]:
    """mem0 OSS on the raw sessions (as mem0_compare.py runs it); no ``as_of`` there."""
    from benchlib import mem0 as m0

    from pipeline.adapters.embedding.local import MiniLMEmbedder
    from pipeline.config import Settings
    from pipeline.store.client import make_client

    settings = Settings()
    stub = m0.Endpoints(MiniLMEmbedder(settings.embedder.model_copy(update={"kind": "local"})), 0)
    server = m0.serve(stub)
    es = make_client(settings.es)
    m0.drop_mem0(es)
    results: dict[str, dict[str, Tally]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        os.environ["MEM0_TELEMETRY"] = "False"  # read when mem0 is first imported, in make_mem0
        os.environ["MEM0_DIR"] = workdir
        config = m0.mem0_config(settings.es.url, server.server_address[1], Path(workdir))
        memory = m0.make_mem0(config, es)
        try:
            for name, data in sets.items():
                for said in sorted(data.sessions, key=lambda s: s.at):
                    messages = session_messages(said)
                    metadata = {"session_date": said.at.isoformat()}
                    user = scope_of(name, "mem0", said.person)
                    memory.add(messages, user_id=user, metadata=metadata, infer=False)

                def search(question: Question, _as_of: bool, name: str = name) -> list[str]:
                    user = scope_of(name, "mem0", question.person)
                    found = memory.search(question.text, top_k=TOP_K, filters={"user_id": user})
                    return [str(item.get("memory", "")) for item in found["results"]]

                results[name] = evaluate(search, data, "raw", as_of=False)
        finally:
            m0.drop_mem0(es)
            server.shutdown()
    return results


# -- latency, side by side ------------------------------------------------------------------------


def latencies(stack: Stack, port: int, data: Dataset, set_name: str) -> tuple[float, float]:
    """p50 search latency (ms) with the newer-first rule and without, over the same memories:
    a second API process on ``port`` with the rule off, the two asked in turn per question."""
    off = Stack(stack.prefix, port, stack.log_dir, tenant=stack.tenant)
    off.start_api({"MEMQ_SEARCH_RIVAL_SCORE_RATIO": "1"})
    times: dict[str, list[float]] = {"on": [], "off": []}
    try:
        with stack.client() as on_client, off.client() as off_client:
            clients = {"on": on_client, "off": off_client}
            for i, question in enumerate(data.questions * 3):
                names = ["on", "off"] if i % 2 == 0 else ["off", "on"]
                for name in names:
                    started = time.perf_counter()
                    memq_search(clients[name], set_name, "raw")(question, False)
                    times[name].append((time.perf_counter() - started) * 1000)
    finally:
        off.stop()
    return statistics.median(times["on"]), statistics.median(times["off"])


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--people", type=int, default=6, help="persons per set (8 topics each)")
    parser.add_argument("--port", type=int, default=8312, help="memq's private API port")
    parser.add_argument("--no-mem0", action="store_true", help="leave mem0 out")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark indices")
    parser.add_argument(
        "--reuse", action="store_true", help="search the indices a --keep run left, no ingest"
    )
    parser.add_argument(
        "--misses", action="store_true", help="print each present question the raw path missed"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="MEMQ_NAME=VALUE",
        help="a setting of the API (repeatable), e.g. MEMQ_SEARCH_RIVAL_SCORE_RATIO=1",
    )
    return parser.parse_args(argv)


def rows(label: str, tallies: dict[str, Tally]) -> Iterator[str]:
    for kind, tally in tallies.items():
        yield f"| {label} | {kind} | {tally.asked} | {tally.row()} |"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sets = {
        name: generate(spec, args.people, seed=i) for i, (name, spec) in enumerate(SETS.items())
    }
    everything = [s for data in sets.values() for s in data.sessions]
    lines = [
        "| set, system | questions | n | current first | stale above | top hit | found (top 10) |",
        "|---|---|---|---|---|---|---|",
    ]
    logs = Path(tempfile.gettempdir()) / PREFIX
    with ScriptedModel() as model:
        model.responder = oracle(everything)
        env = {"MEMQ_LLM_BASE_URL": model.base_url, "MEMQ_LLM_MODEL": "scripted"}
        env |= dict(item.split("=", 1) for item in args.set)
        with running_stack(
            PREFIX, args.port, logs, keep=args.keep, reuse=args.reuse, env=env
        ) as stack:
            with stack.client() as client:
                for name, data in sets.items():
                    for path in ("raw", "extract") if not args.reuse else ():
                        ingest(client, name, path, data)
                for name, data in sets.items():
                    for path in ("raw", "extract"):
                        search = memq_search(client, name, path)
                        tallies = evaluate(search, data, path, as_of=True)
                        lines += rows(f"{name}, memq {path}", tallies)
                        if args.misses and path == "raw":
                            lines += [f"    miss ({name}): {n}" for n in tallies["now"].misses]
            on, off = latencies(stack, args.port + 1, sets["dev"], "dev")
    if not args.no_mem0:
        for name, tallies in mem0_run(sets).items():
            lines += rows(f"{name}, mem0 OSS", tallies)
    sessions = {name: len(data.sessions) for name, data in sets.items()}
    print(f"sessions per set: {sessions}; questions asked at {ASKED_AT.date()}, top {TOP_K}")
    print("\n".join(lines))
    print(
        f"\nsearch p50, raw path, side by side: newer-first on {on:.1f} ms, off {off:.1f} ms "
        f"(ratio {on / off:.2f}; a shared machine: only the ratio means anything)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
