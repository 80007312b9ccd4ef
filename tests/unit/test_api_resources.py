"""The API's own dependencies: built by ``create_app`` from Settings without reaching any
service or loading Celery, and work handed to whatever ``Intake`` the app was given, built by
the first request that queues work."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

from fastapi.testclient import TestClient
from pydantic import SecretStr

from api.app import create_app
from pipeline.config import ChatConfig, Settings
from pipeline.domain.jobs import JobRecord
from pipeline.domain.models import AddRequest
from pipeline.errors import InvalidInputError
from pipeline.features.chat import ChatEvent
from pipeline.features.erase import UserErased
from pipeline.features.reprocess import ReprocessRun
from pipeline.ingestion.intake import Accepted, Intake
from tests.processes import free_port

OFFLINE = {
    "MEMQ_ES_URL": f"http://127.0.0.1:{free_port()}",
    "MEMQ_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
}
SECRET = "generic-webhook-secret"


class ChatOnlyIntake:
    """An intake that keeps the chat events it is given, in this process (the app under test
    needs nothing else from it here)."""

    def __init__(self) -> None:
        self.events: list[ChatEvent] = []

    def submit(
        self,
        request: AddRequest,
        idempotency_key: str | None = None,
        batch_id: str | None = None,
        backfill: bool = False,
        request_id: str | None = None,
    ) -> Accepted:
        raise InvalidInputError("this intake takes chat events only")

    def replay(self, job_id: str) -> JobRecord:
        raise InvalidInputError("this intake takes chat events only")

    def accept_chat(self, event: ChatEvent) -> bool:
        self.events.append(event)
        return True

    def held_job(self, job_id: str) -> JobRecord | None:
        return None

    def erase_user(self, tenant: str, user_id: str) -> UserErased:
        raise InvalidInputError("this intake takes chat events only")

    def start_reprocess(self, run: ReprocessRun) -> str:
        raise NotImplementedError

    def active_reprocess(self) -> str | None:
        return None


def test_building_the_app_and_its_document_loads_no_celery() -> None:
    code = (
        "import sys\n"
        "from api.app import create_app\n"
        "from pipeline.config import Settings\n"
        "create_app(Settings()).openapi()\n"
        "print(' '.join(sorted(m for m in sys.modules"
        " if m.split('.')[0] in ('celery', 'kombu', 'workers'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **OFFLINE},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in ("celery", "kombu", "workers")}, loaded


def test_work_goes_to_the_intake_given_built_by_the_first_request_that_needs_it() -> None:
    built: list[ChatOnlyIntake] = []

    def make(settings: Settings) -> Intake:
        built.append(ChatOnlyIntake())
        return built[-1]

    settings = Settings.model_validate(
        {
            "es": {"url": OFFLINE["MEMQ_ES_URL"]},
            "redis": {"url": OFFLINE["MEMQ_REDIS_URL"]},
            "chat": ChatConfig(webhook_secret=SecretStr(SECRET)),
        }
    )
    with TestClient(create_app(settings, make)) as client:
        assert client.get("/healthz").status_code == 200
        assert built == []  # nothing queued yet: no intake made
        for event_id in ("e1", "e2"):
            body = json.dumps(
                {"event_id": event_id, "conversation_id": "c1", "user_id": "u1", "content": "hi"}
            ).encode()
            ts = str(int(time.time()))
            mac = hmac.new(SECRET.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
            answer = client.post(
                "/v1/webhooks/generic",
                content=body,
                headers={"x-memq-timestamp": ts, "x-memq-signature": f"sha256={mac}"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["accepted"] is True
    assert len(built) == 1  # made once, kept for the process
    assert [(e.event_id, e.conversation, e.user_id) for e in built[0].events] == [
        ("e1", "generic:c1", "u1"),
        ("e2", "generic:c1", "u1"),
    ]


def test_an_intake_instance_is_used_as_given() -> None:
    intake = ChatOnlyIntake()
    assert isinstance(intake, Intake)
    settings = Settings.model_validate({"es": {"url": OFFLINE["MEMQ_ES_URL"]}})
    app = create_app(settings, intake)
    assert app.state.resources.intake is intake
