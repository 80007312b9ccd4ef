"""docker-compose.yml cannot run here (no Docker engine): keep it correct by reading it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def load() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def test_every_service_of_the_stack_is_there() -> None:
    assert set(load()["services"]) == {"redis", "elasticsearch", "api", "worker", "flower"}


def test_every_service_has_a_healthcheck() -> None:
    for name, service in load()["services"].items():
        assert "test" in service.get("healthcheck", {}), name


def test_dependencies_wait_for_health() -> None:
    services = load()["services"]
    for name in ("api", "worker", "flower"):
        depends = services[name]["depends_on"]
        assert depends["redis"]["condition"] == "service_healthy", name
        assert depends["elasticsearch"]["condition"] == "service_healthy", name


def test_redis_persists_and_elasticsearch_is_single_node() -> None:
    services = load()["services"]
    assert "--appendonly" in " ".join(services["redis"]["command"])
    env = services["elasticsearch"]["environment"]
    assert env["discovery.type"] == "single-node"
    assert services["elasticsearch"]["image"].split(":")[-1].startswith("9.")


def test_memq_services_point_at_the_compose_hosts() -> None:
    services = load()["services"]
    for name in ("api", "worker", "flower"):
        env = services[name]["environment"]
        assert env["MEMQ_ES_URL"] == "http://elasticsearch:9200"
        assert env["MEMQ_REDIS_URL"].startswith("redis://redis:6379")


def test_every_service_restarts_after_a_crash() -> None:
    for name, service in load()["services"].items():
        assert service.get("restart") == "unless-stopped", name


def test_flower_needs_a_login_and_is_published_on_loopback_only() -> None:
    flower = load()["services"]["flower"]
    assert flower["environment"]["MEMQ_FLOWER_BASIC_AUTH"].startswith("${MEMQ_FLOWER_BASIC_AUTH:?")
    assert all(port.startswith("127.0.0.1:") for port in flower["ports"])


def test_nothing_but_loopback_is_published() -> None:
    for name, service in load()["services"].items():
        assert all(port.startswith("127.0.0.1:") for port in service.get("ports", [])), name
