"""The cores a worker's processes lend each other for the local model: real record locks
between real processes, and the model's vectors unchanged when its runs go side by side."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from memq.cli import share_cores
from pipeline.adapters.embedding.cores import LentCores, cores_file
from pipeline.adapters.embedding.local import MiniLMEmbedder
from pipeline.config import EmbedderConfig, Settings

FORK = multiprocessing.get_context("fork")


def same(these: list[list[float]], those: list[list[float]]) -> bool:
    return len(these) == len(those) and all(
        sum(x * y for x, y in zip(a, b, strict=True)) > 0.9999
        for a, b in zip(these, those, strict=True)
    )


@pytest.fixture
def four_cores(tmp_path: Path) -> Path:
    path = tmp_path / "cores"
    path.write_bytes(b"\0" * 4)
    return path


def hold(path: str, most: int, taken: Any, done: Any) -> None:
    with LentCores(Path(path)).taken(most) as count:
        taken.put(count)
        done.wait()


def test_a_call_takes_the_cores_no_sibling_holds_and_gives_them_back(four_cores: Path) -> None:
    taken, done = FORK.SimpleQueue(), FORK.Event()
    sibling = FORK.Process(target=hold, args=(str(four_cores), 3, taken, done))
    sibling.start()
    try:
        assert taken.get() == 3
        cores = LentCores(four_cores)
        with cores.taken(4) as mine:
            assert mine == 1
        done.set()
        sibling.join(timeout=30)
        with cores.taken(4) as mine:
            assert mine == 4
            with cores.taken(4) as again:  # a second thread of the same process
                assert again == 0
        with cores.taken(2) as mine:
            assert mine == 2
    finally:
        done.set()
        sibling.join(timeout=30)


def test_a_killed_process_strands_no_core(four_cores: Path) -> None:
    taken, never = FORK.SimpleQueue(), FORK.Event()
    sibling = FORK.Process(target=hold, args=(str(four_cores), 4, taken, never))
    sibling.start()
    assert taken.get() == 4
    with LentCores(four_cores).taken(4) as mine:
        assert mine == 0
    assert sibling.pid is not None
    os.kill(sibling.pid, signal.SIGKILL)
    sibling.join(timeout=30)
    with LentCores(four_cores).taken(4) as mine:
        assert mine == 4


def test_a_cores_file_gone_lends_nothing_and_fails_nothing(tmp_path: Path) -> None:
    cores = LentCores(tmp_path / "removed by a cleaner")
    with cores.taken(4) as mine:
        assert mine == 0
    texts = [f"memory {i}: " + "a walk by the sea " * (1 + i % 9) for i in range(30)]
    lent = MiniLMEmbedder(EmbedderConfig(threads=1, cores_file=str(tmp_path / "gone")))
    assert same(lent.embed(texts), MiniLMEmbedder(EmbedderConfig(threads=1)).embed(texts))
    assert lent._pool is None  # one run after another, on its own share


def test_a_prefork_worker_lends_cores_and_a_lone_process_or_an_endpoint_does_not() -> None:
    lent = share_cores(Settings(), processes=2).embedder
    assert lent.threads == max(1, (os.cpu_count() or 1) // 2)
    assert lent.cores_file is not None
    assert Path(lent.cores_file).stat().st_size == (os.cpu_count() or 1)
    assert share_cores(Settings(), processes=1).embedder.cores_file is None
    remote = Settings(embedder=EmbedderConfig(kind="openai", base_url="http://127.0.0.1:9/v1"))
    assert share_cores(remote, processes=2).embedder.cores_file is None


def test_runs_side_by_side_on_lent_cores_give_the_vectors_of_one_thread() -> None:
    texts = [
        f"memory {i}: " + "hiking in the Alps with my sister " * (1 + i % 7) for i in range(40)
    ]
    alone = MiniLMEmbedder(EmbedderConfig(threads=1))
    lent = MiniLMEmbedder(EmbedderConfig(threads=1, cores_file=str(cores_file(4))))
    side_by_side = lent.embed(texts)
    assert same(side_by_side, alone.embed(texts))
    assert lent._pool is not None  # the runs did go side by side
    made_here = lent._pool[1]

    def in_a_forked_child(done: Any) -> None:
        again = lent.embed(texts[:8])
        made_there = lent._pool[1] if lent._pool is not None else made_here
        done.put(made_there is not made_here and same(again, side_by_side[:8]))

    done = FORK.Queue()
    child = FORK.Process(target=in_a_forked_child, args=(done,))
    child.start()
    assert done.get(timeout=60) is True  # the child made threads of its own and the same vectors
    child.join(timeout=30)
