"""docker-compose.yml cannot run here (no Docker engine): keep it correct by reading it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def load() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


OPS_SERVICES = Path(__file__).resolve().parents[2] / "ops" / "services"
MEMQ_SERVICES = ("api", "worker-io", "worker-cpu", "flower")


def ops_commands() -> dict[str, str]:
    """What ``ops/services`` runs for each of memq's services: ``memq <command>``."""
    text = OPS_SERVICES.read_text()
    table = dict(re.findall(r"^\s*([a-z-]+)\) echo \"(worker [^\"]+)\" ;;", text, re.M))
    return {name: table.get(name, name) for name in MEMQ_SERVICES}


CLUSTER_NODES = {"es01", "es02", "es03"}


def test_every_service_of_the_stack_is_there() -> None:
    services = load()["services"]
    default = {name for name, service in services.items() if "profiles" not in service}
    assert default == {"redis", "elasticsearch", *MEMQ_SERVICES}
    assert set(services) - default == CLUSTER_NODES


def test_the_cluster_profile_is_three_master_eligible_nodes_of_one_cluster() -> None:
    services = load()["services"]
    for name in CLUSTER_NODES:
        service = services[name]
        env = service["environment"]
        assert service["profiles"] == ["cluster"], name
        assert env["node.name"] == name
        assert env["cluster.name"] == "memq-cluster"
        assert set(env["discovery.seed_hosts"].split(",")) == CLUSTER_NODES
        assert "node.roles" not in env  # every role: master-eligible and data
        assert all(port.startswith("127.0.0.1:") for port in service["ports"]), name


METRICS_PORT = re.compile(r" --metrics-port \S+")


def test_memq_services_run_what_ops_runs() -> None:
    """The same command, each worker serving its metrics (on a port of its own under ops/,
    the same port in each compose container)."""
    services = load()["services"]
    commands = ops_commands()
    assert commands["worker-io"].startswith("worker --role io --metrics-port ")
    for name in MEMQ_SERVICES:
        command = services[name]["command"]
        ran = command[-1] if command[0] == "sh" else " ".join(command)
        assert ("--metrics-port" in ran) == ("--metrics-port" in commands[name]), name
        expected = METRICS_PORT.sub("", commands[name])
        assert METRICS_PORT.sub("", ran).endswith(f"memq {expected}"), (name, command)


def test_the_api_gets_an_admin_key_or_compose_refuses_to_start() -> None:
    env = load()["services"]["api"]["environment"]
    assert re.fullmatch(r"\$\{MEMQ_API_ADMIN_KEY:\?.+\}", env["MEMQ_API_ADMIN_KEY"])


def test_redis_requires_a_password_that_compose_refuses_to_start_without() -> None:
    services = load()["services"]
    required = r"\$\{MEMQ_REDIS_PASSWORD:\?.+\}"
    assert re.fullmatch(required, services["redis"]["environment"]["MEMQ_REDIS_PASSWORD"])
    started = " ".join(services["redis"]["command"])
    assert "requirepass" in started and "--requirepass" not in started  # not on a command line
    assert "REDISCLI_AUTH" in " ".join(services["redis"]["healthcheck"]["test"])
    for name in MEMQ_SERVICES:
        assert re.fullmatch(required, services[name]["environment"]["MEMQ_REDIS_PASSWORD"]), name


def test_every_service_has_a_healthcheck() -> None:
    for name, service in load()["services"].items():
        assert "test" in service.get("healthcheck", {}), name


def test_dependencies_wait_for_health() -> None:
    services = load()["services"]
    for name in MEMQ_SERVICES:
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
    for name in MEMQ_SERVICES:
        env = services[name]["environment"]
        # the single node unless MEMQ_COMPOSE_ES_URLS names the cluster profile's nodes
        assert env["MEMQ_ES_URL"] == "${MEMQ_COMPOSE_ES_URLS:-http://elasticsearch:9200}"
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


ROOT = Path(__file__).resolve().parents[2]
PINNED_IMAGE = re.compile(r"[\w./-]+:\d+\.\d+\.\d+")  # a release, never a moving tag


def memq_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert match
    return match.group(1)


def test_every_image_is_pinned_to_a_release() -> None:
    for name, service in load()["services"].items():
        assert PINNED_IMAGE.fullmatch(service["image"]), (name, service["image"])


def test_memq_services_share_one_image_built_here_and_tagged_with_memqs_version() -> None:
    services = load()["services"]
    for name in MEMQ_SERVICES:
        assert services[name]["build"] == ".", name
        assert services[name]["image"] == f"memq:{memq_version()}", name


def test_the_image_installs_the_pinned_versions() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.M)
    assert base and re.fullmatch(r"python:\d+\.\d+\.\d+-slim", base.group(1))
    assert "COPY ops/constraints.txt" in dockerfile
    assert re.search(r"pip install .*-c ops/constraints\.txt", dockerfile)


# Every secret ops/ generates for its stack (ops/lib.sh), and the compose services that need it:
# compose refuses to start without each (``${VAR:?reason}``), never falling back to none.
SECRETS = {
    "MEMQ_API_ADMIN_KEY": ("api",),
    "MEMQ_REDIS_PASSWORD": ("redis", *MEMQ_SERVICES),
    "MEMQ_WEBHOOK_SIGNING_SECRET": MEMQ_SERVICES,
    "MEMQ_FLOWER_BASIC_AUTH": ("flower",),
}


def test_every_secret_of_the_ops_stack_is_required() -> None:
    services = load()["services"]
    for secret, names in SECRETS.items():
        for name in names:
            value = services[name]["environment"][secret]
            assert re.fullmatch(rf"\$\{{{secret}:\?.+\}}", value), (secret, name)


def test_the_ops_stack_has_no_other_secrets() -> None:
    """The secret files ops/ generates are the four above (the admin key has its own code in
    ops/lib.sh): a new one must be added to compose too."""
    scripts = "".join((ROOT / "ops" / name).read_text() for name in ("lib.sh", "redis", "up"))
    files = set(re.findall(r"secret_file ([a-z-]+)", scripts)) | {"admin-key"}
    assert files == {"admin-key", "flower-auth", "webhook-secret", "redis-password"}
