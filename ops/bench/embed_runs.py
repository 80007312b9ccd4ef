"""The local embedder's batches: padded to the longest text of each call, as before, against
runs of similar length (``pipeline.embedding.local.length_runs``), side by side in one run.

The texts are the ones an ingestion batch embeds, from ``ingest_compare``'s conversations: the
new turns of 20 conversations (retrieval), the facts of 40 (embed), and one conversation
alone (a lone job). "padded" is the former code path: the texts in their order, in calls of
``batch_size`` (64), each padded to its longest text. Both go through the same ONNX session,
calls alternate (padded, runs; then runs, padded), and the vectors of both are compared.

    .venv/bin/python ops/bench/embed_runs.py [--repeat 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

from ingest_compare import conversations  # also puts the repository root on sys.path

from pipeline.config import EmbedderConfig
from pipeline.embedding.local import MiniLMEmbedder, length_runs

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


def timed(embed: Callable[[Sequence[str]], Vectors], texts: Sequence[str]) -> float:
    began = time.perf_counter()
    embed(texts)
    return (time.perf_counter() - began) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=6, help="calls of each kind per set")
    args = parser.parse_args(argv)
    embedder = MiniLMEmbedder(EmbedderConfig())
    padded = padded_calls(embedder)
    embedder.embed(["warm up"])
    print(
        "| texts | count | tokens (min-max) | runs | padded ms (median) | runs ms | runs / padded |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, texts in text_sets().items():
        before: list[float] = []
        after: list[float] = []
        for turn in range(args.repeat):
            if turn % 2 == 0:
                before.append(timed(padded, texts))
                after.append(timed(embedder.embed, texts))
            else:
                after.append(timed(embedder.embed, texts))
                before.append(timed(padded, texts))
        same = min(
            sum(x * y for x, y in zip(a, b, strict=True))
            for a, b in zip(padded(texts), embedder.embed(texts), strict=True)
        )
        assert same > 0.9999, f"{name}: the vectors differ (cosine {same})"
        lengths = [len(e.ids) for e in embedder._tokenizer.encode_batch(texts)]
        runs = len(length_runs(lengths, embedder.batch_size))
        b, a = statistics.median(before), statistics.median(after)
        print(
            f"| {name} | {len(texts)} | {min(lengths)}-{max(lengths)} | {runs} | {b:.0f} | "
            f"{a:.0f} | {a / b:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
