"""The local embedder's calls of the model, three ways side by side in one run:
- "padded": the texts in their order, in calls of ``batch_size`` (64), each padded to its
  longest text (the code before runs of similar length);
- "runs": sorted by length and run in groups of similar length, a group as large as the batch
  size (the code before a run's token cap);
- "capped": the same runs, each at most ``RUN_TOKENS`` padded tokens
  (``pipeline.adapters.embedding.local.length_runs``, what a worker's process runs when its siblings
  are busy);
- "lent": the capped runs side by side on every core of the machine, as a worker's process
  runs them when its siblings lend it their cores (``pipeline.adapters.embedding.cores``).

The texts are the ones an ingestion batch embeds, from ``ingest_compare``'s conversations: the
new turns of 20 conversations (retrieval), the facts of 40 (embed), and one conversation
alone (a lone job). All four go through the same ONNX session, opened with ``--threads``
threads as a worker's process opens it (1, the default: a CPU worker's process on a machine of
two cores; 0: every core, as the API and a lone process), the order of the three turns
around from one call to the next, and the vectors of all four are compared.

    .venv/bin/python ops/bench/embed_runs.py [--repeat 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from benchlib.conversations import conversations

from pipeline.adapters.embedding.cores import LentCores, cores_file
from pipeline.adapters.embedding.local import RUN_TOKENS, MiniLMEmbedder, length_runs
from pipeline.config import EmbedderConfig

Vectors = list[list[float]]


def text_sets() -> dict[str, list[str]]:
    convs = conversations(60)
    turns = ["\n".join(f"{m['role']}: {m['content']}" for m in c.messages) for c in convs]
    facts = [
        f"The user said: {m['content']}"
        for c in convs[20:60]
        for m in c.messages
        if m["role"] == "user"
    ]
    return {
        "new turns of 20 conversations": turns[20:40],
        "facts of 40 conversations": facts,
        "one conversation": turns[3:4],
    }


def padded_calls(embedder: MiniLMEmbedder) -> Callable[[Sequence[str]], Vectors]:
    """The former path: calls of ``batch_size`` texts in their order, padded to the longest."""

    def embed(texts: Sequence[str]) -> Vectors:
        encodings = embedder._tokenizer.encode_batch(list(texts))
        vectors: Vectors = []
        for start in range(0, len(texts), embedder.batch_size):
            chunk = encodings[start : start + embedder.batch_size]
            vectors.extend(embedder._embed_run([e.ids for e in chunk]))
        return vectors

    return embed


def run_calls(embedder: MiniLMEmbedder, tokens: int) -> Callable[[Sequence[str]], Vectors]:
    """The embedder's own path, its runs capped at ``tokens`` padded tokens (same session)."""
    other = copy.copy(embedder)
    other.run_tokens = tokens
    return other.embed


def lent_calls(embedder: MiniLMEmbedder) -> Callable[[Sequence[str]], Vectors]:
    """The embedder's own path, lent every core of the machine by idle siblings (same session)."""
    other = copy.copy(embedder)
    other._cores = LentCores(cores_file(os.cpu_count() or 1))
    return other.embed


def timed(embed: Callable[[Sequence[str]], Vectors], texts: Sequence[str]) -> float:
    began = time.perf_counter()
    embed(texts)
    return (time.perf_counter() - began) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=8, help="calls of each kind per set")
    parser.add_argument("--threads", type=int, default=1, help="the model's threads (0: all)")
    args = parser.parse_args(argv)
    embedder = MiniLMEmbedder(EmbedderConfig(threads=args.threads))
    ways = {
        "padded": padded_calls(embedder),
        "runs": run_calls(embedder, tokens=sys.maxsize),
        "capped": embedder.embed,
        "lent": lent_calls(embedder),
    }
    embedder.embed(["warm up"])
    print(
        f"threads: {args.threads or 'all cores'}; a capped run holds {RUN_TOKENS} tokens at most; "
        f"lent: {os.cpu_count()} cores"
    )
    print(
        "| texts | count | tokens (min-max) | calls: runs, capped | padded ms (median) | "
        "runs ms | capped ms | lent ms | runs / padded | capped / runs | lent / capped |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    names = list(ways)
    for name, texts in text_sets().items():
        took: dict[str, list[float]] = {way: [] for way in names}
        for turn in range(args.repeat):
            for way in names[turn % len(names) :] + names[: turn % len(names)]:
                took[way].append(timed(ways[way], texts))
        reference = ways["padded"](texts)
        for way in ("runs", "capped", "lent"):
            same = min(
                sum(x * y for x, y in zip(a, b, strict=True))
                for a, b in zip(reference, ways[way](texts), strict=True)
            )
            assert same > 0.9999, f"{name}, {way}: the vectors differ (cosine {same})"
        lengths = [len(e.ids) for e in embedder._tokenizer.encode_batch(texts)]
        calls = (
            len(length_runs(lengths, embedder.batch_size, sys.maxsize)),
            len(length_runs(lengths, embedder.batch_size)),
        )
        p, r, c, n = (statistics.median(took[way]) for way in names)
        print(
            f"| {name} | {len(texts)} | {min(lengths)}-{max(lengths)} | {calls[0]}, {calls[1]} | "
            f"{p:.0f} | {r:.0f} | {c:.0f} | {n:.0f} | {r / p:.2f} | {c / r:.2f} | {n / c:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
