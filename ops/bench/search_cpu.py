"""What one search costs in CPU, on the scope ``search_latency.py --keep`` leaves (prefix
``memqbench-latency``): this process's CPU (the searcher's Python, the model's threads, the
client) and Elasticsearch's (its node's process CPU, from the nodes stats API), per search,
beside the wall time, for memq's search in process and the bare kNN floor.

On a machine of two cores shared by the search and Elasticsearch, a search's time follows the
CPU both spend on it more than any one round trip: a ms of CPU saved anywhere is a shorter
search and, under load, more searches per second.

    .venv/bin/python ops/bench/search_latency.py --sizes 10000 --keep
    cd /tmp && PYTHONPATH=$REPO:$REPO/ops/bench $REPO/.venv/bin/python \\
        $REPO/ops/bench/search_cpu.py [--queries 200] [--rounds 2]

Each system asks the same questions in turn (the order rotated per round), after 20 untimed.
``MEMQ_EMBEDDER_THREADS`` and the other settings apply as they do to the API.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable

from benchlib.search import (
    MEMQ_PREFIX,
    SEED,
    floor_search,
    local_minilm,
    questions,
    search_query,
    settings_for,
)
from elasticsearch import Elasticsearch

from pipeline.services import Services

WARM_UP = 20


# Elasticsearch refreshes a node's process stats at most once a second
# (``monitor.process.refresh_interval``): read after this long idle, they are up to date.
STATS_REFRESH_S = 1.2


def elasticsearch_cpu_ms(es: Elasticsearch) -> float:
    """The CPU the node's process has used so far (one node: the bench's stack), read after
    ``STATS_REFRESH_S`` of quiet so that the stats include the last searches."""
    time.sleep(STATS_REFRESH_S)
    nodes = es.nodes.stats(metric="process").body["nodes"]
    return float(sum(n["process"]["cpu"]["total_in_millis"] for n in nodes.values()))


def costed(es: Elasticsearch, search: Callable[[str], object], asked: list[str]) -> str:
    """Wall, this process's CPU and Elasticsearch's CPU per search, in ms."""
    node = elasticsearch_cpu_ms(es)
    cpu, wall = time.process_time(), time.perf_counter()
    for query in asked:
        search(query)
    count = len(asked)
    wall_ms = (time.perf_counter() - wall) * 1000 / count
    cpu_ms = (time.process_time() - cpu) * 1000 / count
    node_ms = (elasticsearch_cpu_ms(es) - node) / count
    return f"{wall_ms:.1f} | {cpu_ms:.1f} | {node_ms:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    settings = settings_for(MEMQ_PREFIX)
    services = Services(settings)
    es = services.store.client
    asked = questions(random.Random(SEED), args.queries)
    searches: dict[str, Callable[[str], object]] = {
        "floor": floor_search(
            es, local_minilm(services.searcher.embedder), services.store.names.memories
        ),
        "memq in process": lambda q: services.searcher.search(search_query(q)),
    }
    if not services.searcher.search(search_query(asked[0])):
        raise SystemExit("search_cpu: the scope is empty; run search_latency.py --keep first")
    for search in searches.values():
        for query in asked[:WARM_UP]:
            search(query)
    print("| round | system | wall ms | this process's CPU ms | Elasticsearch's CPU ms |")
    print("|---|---|---|---|---|")
    names = list(searches)
    for round_ in range(1, args.rounds + 1):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            print(f"| {round_} | {name} | {costed(es, searches[name], asked)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
