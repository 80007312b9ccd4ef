"""The benchmarks' seam to the scripted model (``ops/bench/benchlib/model.py``): the server runs
as its own process (``python -m tests.fakellm --responder-url``) and replies what the
benchmark's responder decides; its counts and provider model are reached over its admin
routes. Run as a benchmark runs, in a process whose path has ``ops/bench`` first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, httpx
from benchlib.model import Provider, ScriptedModel

def chat(url):
    body = {"model": "m", "messages": [{"role": "user", "content": "user: I moved to Ghent"}]}
    return httpx.post(f"{url}/chat/completions", json=body, timeout=10)

with ScriptedModel() as llm:
    llm.responder = lambda r: json.dumps({"memory": [{"text": r["messages"][0]["content"]}]})
    reply = chat(llm.base_url).json()["choices"][0]["message"]["content"]
    llm.provider = Provider(median_s=0.5, p95_s=0.6, limit=1, retry_after_s=1)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(3) as pool:
        statuses = sorted(r.status_code for r in pool.map(chat, [llm.base_url] * 3))
    print(json.dumps({"reply": reply, "statuses": statuses, "counts": llm.counts()}))
"""


def test_the_scripted_model_process_replies_what_the_bench_decides() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "ops" / "bench"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(seen["reply"]) == {"memory": [{"text": "user: I moved to Ghent"}]}
    assert seen["statuses"][0] == 200 and seen["statuses"][-1] == 429
    assert seen["counts"] == {
        "chat": 1 + seen["statuses"].count(200),
        "embeddings": 0,
        "refused": seen["statuses"].count(429),
    }
