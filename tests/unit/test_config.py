from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.config import SearchConfig, Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("MEMQ_") or key == "OPENAI_API_KEY":
            monkeypatch.delenv(key)


def test_defaults_point_at_the_local_stack() -> None:
    settings = Settings()
    assert settings.es.url == "http://127.0.0.1:9200"
    assert settings.redis.url == "redis://127.0.0.1:6379/0"
    assert (settings.api.port, settings.flower.port) == (8000, 5555)
    assert settings.es.index_prefix == "memq"
    assert settings.embedder.kind == "local"
    assert not settings.llm_configured()


def test_sections_read_prefixed_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_ES_URL", "http://es.internal:9201/")
    monkeypatch.setenv("MEMQ_ES_INDEX_PREFIX", "tenant-a")
    monkeypatch.setenv("MEMQ_LLM_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("MEMQ_LLM_TIMEOUT_S", "12.5")
    monkeypatch.setenv("MEMQ_API_PORT", "9000")
    settings = Settings()
    assert settings.es.url == "http://es.internal:9201"
    assert settings.es.index_prefix == "tenant-a"
    assert settings.llm.base_url == "http://127.0.0.1:11434/v1"
    assert settings.llm.timeout_s == 12.5
    assert settings.api.port == 9000
    assert settings.llm_configured()


def test_openai_api_key_is_the_fallback_llm_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    assert Settings().llm_api_key() is not None
    monkeypatch.setenv("MEMQ_LLM_API_KEY", "sk-memq")
    key = Settings().llm_api_key()
    assert key is not None and key.get_secret_value() == "sk-memq"


def test_secrets_do_not_print(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_LLM_API_KEY", "sk-very-secret")
    assert "sk-very-secret" not in repr(Settings())


@pytest.mark.parametrize(
    ("variable", "value", "complaint"),
    [
        ("MEMQ_ES_INDEX_PREFIX", "Upper", "index_prefix"),
        ("MEMQ_ES_INDEX_PREFIX", "_hidden", "index_prefix"),
        ("MEMQ_ES_URL", "127.0.0.1:9200", "http://"),
        ("MEMQ_REDIS_URL", "http://127.0.0.1:6379", "redis://"),
        ("MEMQ_API_PORT", "70000", "api.port"),
        ("MEMQ_EMBEDDER_KIND", "word2vec", "embedder.kind"),
        ("MEMQ_QUEUES_IO", "has space", "queue names"),
        ("MEMQ_ES_TYPO", "1", "es.typo"),
        ("MEMQ_WORKER_VISIBILITY_TIMEOUT_S", "60", "visibility_timeout_s"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, complaint: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert complaint in str(caught.value)


def test_settings_are_immutable() -> None:
    settings = Settings()
    with pytest.raises(ValidationError):
        settings.es.url = "http://elsewhere:9200"  # type: ignore[misc]


def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_LLM_BASE_URL", "")
    monkeypatch.setenv("MEMQ_FLOWER_BASIC_AUTH", "")
    settings = Settings()
    assert settings.llm.base_url is None
    assert settings.flower.basic_auth is None


@pytest.mark.parametrize(
    "blank",
    [
        {"OPENAI_API_KEY": ""},
        {"OPENAI_API_KEY": "   "},
        {"MEMQ_LLM_API_KEY": ""},
        {"MEMQ_LLM_API_KEY": " ", "OPENAI_API_KEY": ""},
        {"MEMQ_LLM_BASE_URL": "", "OPENAI_API_KEY": "", "MEMQ_LLM_API_KEY": ""},
        {"MEMQ_LLM_BASE_URL": "  "},
    ],
    ids=lambda blank: "+".join(f"{k}={v!r}" for k, v in blank.items()),
)
def test_a_blank_llm_key_or_url_is_no_llm(
    monkeypatch: pytest.MonkeyPatch, blank: dict[str, str]
) -> None:
    """Compose passes an unset variable as the empty string: that configures nothing."""
    for variable, value in blank.items():
        monkeypatch.setenv(variable, value)
    settings = Settings()
    assert settings.llm_api_key() is None
    assert not settings.llm_configured()


def test_a_blank_memq_key_leaves_the_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_LLM_API_KEY", " ")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real")
    key = Settings().llm_api_key()
    assert key is not None and key.get_secret_value() == "sk-real"
    assert Settings().llm_configured()


def test_the_sdk_variables_are_ignored_but_a_key_under_api_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK reads MEMQ_CLIENT_*: a machine running memq can set them safely. A name under
    a real section (MEMQ_API_KEY) would be refused, which is why the SDK does not use it."""
    monkeypatch.setenv("MEMQ_CLIENT_URL", "http://127.0.0.1:8000")
    monkeypatch.setenv("MEMQ_CLIENT_API_KEY", "mq_abc_def")
    monkeypatch.setenv("MEMQ_CLIENT_TIMEOUT_S", "10")
    settings = Settings()  # builds: unknown names outside the sections are ignored
    assert "client" not in type(settings).model_fields
    monkeypatch.setenv("MEMQ_API_KEY", "mq_abc_def")
    with pytest.raises(ValidationError, match="key"):
        Settings()


def test_worker_metrics_port_is_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().worker.metrics_port == 0
    monkeypatch.setenv("MEMQ_WORKER_METRICS_PORT", "9464")
    assert Settings().worker.metrics_port == 9464


def test_a_killed_workers_metrics_dir_is_removed_by_the_next_worker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tempfile

    from memq.cli import prepare_metrics_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")  # restored after the test
    stale = tmp_path / f"memq-metrics-{2**22 + 7}-abc"  # above any pid_max: not alive
    stale.mkdir()
    alive = tmp_path / f"memq-metrics-{os.getpid()}-def"
    alive.mkdir()

    fresh = Path(prepare_metrics_dir())

    assert not stale.exists() and alive.exists()
    assert fresh.parent == tmp_path and fresh.name.startswith(f"memq-metrics-{os.getpid()}-")
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(fresh)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MEMQ_ES_URLS", "http://es1:9200, http://es2:9200/,https://es3:9200"),
        ("MEMQ_ES_URLS", '["http://es1:9200", "http://es2:9200", "https://es3:9200"]'),
        ("MEMQ_ES_URL", "http://es1:9200,http://es2:9200,https://es3:9200"),
    ],
)
def test_many_node_urls_are_one_list_and_url_is_the_first(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    es = Settings().es
    assert es.urls == ("http://es1:9200", "http://es2:9200", "https://es3:9200")
    assert es.url == "http://es1:9200"


def test_one_node_url_is_a_list_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().es.urls == ("http://127.0.0.1:9200",)
    monkeypatch.setenv("MEMQ_ES_URL", "http://es.internal:9201/")
    assert Settings().es.urls == ("http://es.internal:9201",)
    monkeypatch.setenv("MEMQ_ES_URLS", "http://es.internal:9201")  # the same node: agreed
    assert Settings().es.urls == ("http://es.internal:9201",)


@pytest.mark.parametrize(
    ("variable", "value", "complaint"),
    [
        ("MEMQ_ES_URLS", ",", "at least one Elasticsearch node URL"),
        ("MEMQ_ES_URLS", "[]", "at least one Elasticsearch node URL"),
        ("MEMQ_ES_URLS", "http://es1:9200,es2:9200", "'es2:9200' must be an http://"),
        ("MEMQ_ES_URLS", "http://es1:9200,ftp://es2", "'ftp://es2' must be an http://"),
        ("MEMQ_ES_URLS", '["http://es1:9200"', "not a JSON list"),
        ("MEMQ_ES_URLS", "[1, 2]", "node URLs"),
        ("MEMQ_ES_URL", "http://,http://es2:9200", "must be an http://"),
    ],
)
def test_bad_node_lists_are_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, complaint: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match="es") as caught:
        Settings()
    assert complaint in str(caught.value)


def test_url_and_urls_naming_different_nodes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_ES_URL", "http://es1:9200")
    monkeypatch.setenv("MEMQ_ES_URLS", "http://es1:9200,http://es2:9200")
    with pytest.raises(ValidationError, match="set only one of them"):
        Settings()


def test_an_empty_urls_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMQ_ES_URLS", "")
    assert Settings().es.urls == ("http://127.0.0.1:9200",)


def test_the_redis_password_goes_into_a_url_that_names_none() -> None:
    from pipeline.config import RedisConfig

    given = RedisConfig(url="redis://10.0.0.5:6380/2", password="p@ss/word")  # type: ignore[arg-type]
    assert given.url == "redis://:p%40ss%2Fword@10.0.0.5:6380/2"
    own = RedisConfig(url="redis://:mine@host:1/0", password="other")  # type: ignore[arg-type]
    assert own.url == "redis://:mine@host:1/0"
    assert RedisConfig(url="redis://host:1/0").url == "redis://host:1/0"


def test_a_retired_search_setting_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMQ_SEARCH_REPLY_PREFETCH_RANK", "10")
    monkeypatch.setenv("MEMQ_SEARCH_REPLY", "false")
    with caplog.at_level(logging.WARNING, logger="pipeline.config"):
        settings = Settings()
    assert settings.search.reply is False  # the section's other settings still apply
    assert "MEMQ_SEARCH_REPLY_PREFETCH_RANK is no longer a setting" in caplog.text
    with pytest.raises(ValidationError, match="reply_prefetch_rnk"):
        SearchConfig.model_validate({"reply_prefetch_rnk": 10})  # a typo is still refused
