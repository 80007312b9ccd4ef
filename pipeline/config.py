"""memq settings: one typed object, built once at process start and passed down.

Every value comes from an environment variable with the prefix ``MEMQ_`` followed by the
section and the field, e.g. ``MEMQ_ES_URL``, ``MEMQ_LLM_BASE_URL``, ``MEMQ_API_PORT``.
Nothing in memq reads the environment anywhere else. ``MEMQ_CLIENT_*`` belongs to the HTTP
SDK (``memq.Client``): no section may be named ``client``, and these settings ignore it.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Annotated, Literal, Self
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

log = logging.getLogger(__name__)

RETIRED_SEARCH = {
    "reply_prefetch_rank": "the reply to the best hit is read with the hits shown, in the"
    " search's last round trip",
}
"""Search settings that were and are no longer: each with what took its place."""

_INDEX_PREFIX = re.compile(r"^[a-z0-9][a-z0-9_-]{0,40}$")
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _empty_means_unset(cls, data: object) -> object:
        """``MEMQ_LLM_BASE_URL=`` (as compose passes an unset variable) means "use the default"."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value != ""}
        return data


def _node_urls(value: object) -> list[str]:
    """Node URLs from a comma-separated string, a JSON list in a string, or a list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"is not a JSON list of URLs ({exc})") from exc
        else:
            value = text.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be node URLs, comma-separated or a JSON list")
    urls = [v.strip().rstrip("/") for v in value if v.strip()]
    if not urls:
        raise ValueError("needs at least one Elasticsearch node URL")
    return urls


class ElasticsearchConfig(_Section):
    """Where memories live. ``index_prefix`` namespaces every index and template.

    ``urls`` lists the cluster's nodes (``MEMQ_ES_URLS``, comma-separated or a JSON list);
    ``MEMQ_ES_URL`` may list them too, comma-separated. Whichever is given is the one source:
    ``urls`` holds every node, ``url`` the first (for callers that need one address). Both
    given and different is refused rather than one silently winning."""

    url: str = "http://127.0.0.1:9200"
    # not JSON-decoded by the settings source: ``_node_urls`` reads both spellings itself
    urls: Annotated[tuple[str, ...], NoDecode] = ()
    username: str | None = None
    password: SecretStr | None = None
    index_prefix: str = "memq"
    timeout_s: float = Field(default=30.0, gt=0, le=600)
    shards: int = Field(default=1, ge=1, le=64)
    replicas: int = Field(default=0, ge=0, le=8)

    @model_validator(mode="before")
    @classmethod
    def _one_list_of_nodes(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        data = {key: value for key, value in data.items() if value != ""}
        if "url" not in data and "urls" not in data:
            return data
        from_url = _node_urls(data["url"]) if "url" in data else None
        from_urls = _node_urls(data["urls"]) if "urls" in data else None
        if from_url is not None and from_urls is not None and from_url != from_urls:
            raise ValueError(
                "MEMQ_ES_URL and MEMQ_ES_URLS name different nodes: set only one of them"
            )
        urls = from_urls or from_url or []
        return {**data, "url": urls[0], "urls": urls}

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("urls")
    @classmethod
    def _urls_are_http(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_http_url(url) for url in value)

    @model_validator(mode="after")
    def _urls_default_to_url(self) -> ElasticsearchConfig:
        if not self.urls:  # built from defaults: the one default node
            object.__setattr__(self, "urls", (self.url,))
        return self

    @field_validator("index_prefix")
    @classmethod
    def _prefix_is_an_index_name(cls, value: str) -> str:
        if not _INDEX_PREFIX.match(value):
            raise ValueError(
                "must be 1-41 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
            )
        return value


def _http_url(value: str) -> str:
    """One node's URL: http(s), with a host, no trailing slash."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} must be an http:// or https:// URL with a host")
    return value.rstrip("/")


class RedisConfig(_Section):
    """The Celery broker and result backend. ``password`` (``MEMQ_REDIS_PASSWORD``; ``ops/``
    generates one like the admin key) goes into ``url`` when the URL names none, so every
    client made from ``url`` authenticates."""

    url: str = "redis://127.0.0.1:6379/0"
    password: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _url_is_redis(cls, value: str) -> str:
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @model_validator(mode="after")
    def _password_in_url(self) -> Self:
        secret = self.password.get_secret_value() if self.password is not None else ""
        parts = urlsplit(self.url)
        if not secret or parts.password is not None or parts.scheme == "unix":
            return self
        host = parts.netloc.rpartition("@")[2]
        netloc = f"{parts.username or ''}:{quote(secret, safe='')}@{host}"
        object.__setattr__(self, "url", urlunsplit(parts._replace(netloc=netloc)))
        return self


class LLMConfig(_Section):
    """Any OpenAI-compatible chat completions endpoint; the key may come from OPENAI_API_KEY."""

    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0, le=900)
    max_retries: int = Field(default=3, ge=0, le=20)
    # The longest reply the model may write, in tokens (None: the server's own cap). A JSON reply
    # cut off at it fails its job, saying so; a small local model that loops inside its JSON
    # grammar otherwise writes until its context is full.
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    vision: bool = False
    # LLM calls in flight at once per worker process; lowered by itself while the provider
    # answers 429, and raised again as calls succeed
    max_concurrency: int = Field(default=16, ge=1, le=1024)


class EmbedderConfig(_Section):
    """``local`` runs the model shipped inside a PyPI package; ``openai`` calls an endpoint."""

    kind: Literal["local", "openai"] = "local"
    model: str = "all-MiniLM-L6-v2"
    dims: int = Field(default=384, ge=8, le=4096)
    base_url: str | None = None
    api_key: SecretStr | None = None
    batch_size: int = Field(default=64, ge=1, le=2048)
    timeout_s: float = Field(default=60.0, gt=0, le=900)
    # Threads of the local model in one process. 0: a lone process (the API) uses every core; a
    # worker's processes share the cores out among themselves (``memq worker`` sets it).
    threads: int = Field(default=0, ge=0, le=256)
    # Set by ``memq worker`` for its prefork processes: a file of one byte per core through
    # which they lend each other the cores they are not using
    # (pipeline/adapters/embedding/cores.py). None: a process keeps to ``threads``.
    cores_file: str | None = None
    # Vectors of entity names kept per process (most recently used first out), so the model
    # runs once for a name that keeps coming back, such as a speaker's; 0 keeps none. About
    # 1.6 KB a name at 384 dimensions.
    name_cache: int = Field(default=10_000, ge=0, le=1_000_000)


class QueueConfig(_Section):
    """Celery queue names: I/O-bound phases, CPU-bound phases, and backfill traffic."""

    io: str = "memq.io"
    cpu: str = "memq.cpu"
    backfill: str = "memq.backfill"

    @field_validator("io", "cpu", "backfill")
    @classmethod
    def _valid_queue_name(cls, value: str) -> str:
        if not _QUEUE_NAME.match(value):
            raise ValueError("queue names are 1-100 characters of letters, digits, '_', '.', '-'")
        return value


class SearchConfig(_Section):
    """Hybrid search: how much each signal weighs in the fused score, and how wide to look."""

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: object) -> object:
        """A setting search no longer has is left out, with a warning, so a deployment that
        still sets it starts as before."""
        if not isinstance(data, dict):
            return data
        for name in RETIRED_SEARCH.keys() & data.keys():
            variable = f"MEMQ_SEARCH_{name.upper()}"
            log.warning(
                "%s is no longer a setting and is ignored: %s", variable, RETIRED_SEARCH[name]
            )
        return {key: value for key, value in data.items() if key not in RETIRED_SEARCH}

    weight_semantic: float = Field(default=0.45, ge=0, le=1)
    weight_bm25: float = Field(default=0.40, ge=0, le=1)
    weight_entity: float = Field(default=0.15, ge=0, le=1)
    default_top_k: int = Field(default=20, ge=1, le=200)
    max_top_k: int = Field(default=200, ge=1, le=1000)
    candidates_per_signal: int = Field(default=50, ge=10, le=1000)
    # A search with ``rerank`` has its best ``rerank_candidates`` fused hits rescored by the
    # reranker (at least top_k), and returns the top_k of those.
    rerank_candidates: int = Field(default=50, ge=1, le=1000)
    entity_links_per_entity: int = Field(default=100, ge=1, le=10_000)
    # Time: a query that names a period ("in May 2023", "last week") adds a signal for memories
    # observed in or near it; a "when" question one for memories whose text carries a time.
    # Both are added to the fused score only when the query asks them; 0 turns one off.
    weight_time: float = Field(default=0.15, ge=0, le=1)
    weight_dated: float = Field(default=0.10, ge=0, le=1)
    # Feedback: the terms the best ``feedback_seeds`` hits share (at most ``feedback_terms``)
    # lift the candidates that mention them; the fused score weighs 1 against it. 0: off.
    weight_feedback: float = Field(default=0.2, ge=0, le=1)
    feedback_seeds: int = Field(default=2, ge=1, le=20)
    feedback_terms: int = Field(default=10, ge=1, le=100)
    # Second hop (pipeline.serving.multihop): for the people a query names (at most ``hop_people``),
    # the question's best BM25 matches among what they said join the candidates (at most
    # ``hop_candidates`` new ones), and a memory said by one of them is lifted by
    # ``weight_hop`` (the fused score weighs 1). 0: off; a search may ask ``hop: false``.
    weight_hop: float = Field(default=0.1, ge=0, le=1)
    hop_people: int = Field(default=2, ge=1, le=10)
    hop_candidates: int = Field(default=20, ge=1, le=200)
    # Reply: the next turn after the best hit, when that hit is a verbatim message, is placed
    # second (pipeline.serving.replies). False: off; a search may ask ``reply: false``.
    reply: bool = True
    # The newer statement first (pipeline.serving.currency): for a question about the present, of
    # two of the best hits said by one speaker at different times, alike (cosine of their vectors
    # at least ``rival_similarity``) and near in score (the lower at least ``rival_score_ratio``
    # of the higher), the newer is placed just above the older. rival_score_ratio 1: off.
    # Both chosen on the dev set of ops/bench/knowledge_update.py.
    rival_similarity: float = Field(default=0.45, ge=-1, le=1)
    rival_score_ratio: float = Field(default=0.6, ge=0, le=1)


class RerankConfig(_Section):
    """An OpenAI-style ``/rerank`` endpoint (the shape TEI, vLLM and Jina serve). Off unless
    ``url`` is set; then a search asks for it with ``rerank: true``. ``format`` names the
    request's list of texts: ``documents`` (vLLM, Jina, Cohere) or ``texts`` (TEI)."""

    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    model: str | None = None
    api_key: SecretStr | None = None
    format: Literal["documents", "texts"] = "documents"
    timeout_s: float = Field(default=10.0, gt=0, le=300)


class WorkerConfig(_Section):
    """Worker processes: ``concurrency`` processes for CPU phases, ``io_concurrency`` threads for
    the I/O phases (LLM and Elasticsearch calls), retry policy and time limits."""

    concurrency: int = Field(default=2, ge=1, le=256)
    io_concurrency: int = Field(default=8, ge=1, le=512)
    task_time_limit_s: int = Field(default=600, ge=1)
    task_soft_time_limit_s: int = Field(default=540, ge=1)
    retry_backoff_s: int = Field(default=2, ge=1)
    retry_backoff_max_s: int = Field(default=60, ge=1)
    visibility_timeout_s: int = Field(default=900, ge=5)
    # a micro-batch: up to batch_max_jobs ready jobs, or those ready within batch_wait_ms
    # (waited for only while jobs arrive fast enough that another is due within the wait;
    # a lone job starts at once); at most
    # batches_in_flight batches per lane (live, backfill) run at once, the rest wait to join one
    batch_max_jobs: int = Field(default=32, ge=1, le=1024)
    batch_wait_ms: int = Field(default=20, ge=0, le=10_000)
    batches_in_flight: int = Field(default=2, ge=1, le=1024)
    # extraction in waves: a job whose LLM call has returned waits for its batch's other calls
    # at most wave_ms, then the jobs that are done go on as a run of their own while the slower
    # calls still run, and a live batch whose calls are still out after wave_ms gives its slot
    # up (0: a batch goes on whole, slot and all; the default, 500, is what docs/BENCHMARKS.md
    # measured)
    wave_ms: int = Field(default=500, ge=0, le=60_000)
    # when a batch starts, the jobs next in its sessions' lines have their new turns embedded
    # ahead, on the CPU queue, for retrieval to find when their turn comes (live lane only)
    embed_ahead: bool = True
    # a transient fault (Elasticsearch, Redis, an unreachable LLM) is retried with capped
    # exponential backoff for this long from its first failure, then the job ends ``dead``
    retry_deadline_s: int = Field(default=900, ge=1, le=86_400)
    # Ownership: a running phase task holds a lease on its batch, renewed every lease_s / 3; a
    # lease that lapses (its worker died, or the call overran task_time_limit_s) is taken by the
    # reaper, which one worker runs every reaper_interval_s under a Redis lock, and the batch's
    # jobs are sent on alone from that phase. A job whose worker died max_deliveries times ends
    # ``dead``. See docs/ARCHITECTURE.md, "Ownership leases".
    lease_s: float = Field(default=15.0, ge=1, le=600)
    reaper_interval_s: float = Field(default=5.0, ge=0.5, le=600)
    max_deliveries: int = Field(default=4, ge=1, le=100)
    # A run's next message, once sent, must be claimed by a worker within this; past it the
    # reaper sends the run's jobs on again (a message reserved by a worker that was then
    # killed would otherwise wait for the broker's visibility timeout). A message that was
    # only slow to come finds its run gone and does nothing.
    pickup_s: float = Field(default=60.0, ge=5, le=3600)
    # A session's line head that was never started (its hand-on or its intake lost) is made
    # ready by the reaper once it was accepted this long ago and is not waiting to be gathered.
    orphan_after_s: float = Field(default=60.0, ge=1, le=86_400)
    # Prometheus: the worker's main process serves its processes' metrics here (0: off)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"

    @model_validator(mode="after")
    def _limits_are_ordered(self) -> WorkerConfig:
        if not self.task_soft_time_limit_s < self.task_time_limit_s < self.visibility_timeout_s:
            raise ValueError(
                "need task_soft_time_limit_s < task_time_limit_s < visibility_timeout_s, "
                "or a running task is delivered again to another worker"
            )
        return self


class ChatConfig(_Section):
    """Chat-platform webhooks. A platform is enabled by its secret; its messages land in
    ``tenant``. Messages of one channel/thread arriving within ``debounce_s`` of each other
    become one job."""

    tenant: str = "default"
    debounce_s: float = Field(default=5.0, ge=0.1, le=600)
    max_buffered: int = Field(default=200, ge=1, le=10_000)
    slack_signing_secret: SecretStr | None = None
    telegram_secret_token: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    signature_tolerance_s: int = Field(default=300, ge=10, le=3600)


class ApiConfig(_Section):
    """The HTTP API. ``admin_key`` is the bootstrap key that creates tenant keys (at least 24
    characters); without it only existing tenant keys work."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    admin_key: SecretStr | None = None
    max_body_bytes: int = Field(default=5_000_000, ge=1_000, le=100_000_000)
    wait_max_s: float = Field(default=30.0, gt=0, le=300)
    # Per tenant, across API processes (0: no limit). See api/limits.py.
    rate_write_per_s: int = Field(default=200, ge=0, le=1_000_000)
    rate_search_per_s: int = Field(default=200, ge=0, le=1_000_000)
    # reads by id, listings, history, job records (each a read of Elasticsearch)
    rate_read_per_s: int = Field(default=1000, ge=0, le=1_000_000)
    # Counted over windows of this many seconds: a tenant may spend a window's worth in a burst.
    rate_window_s: int = Field(default=1, ge=1, le=60)
    open_cursors_per_tenant: int = Field(default=20, ge=0, le=10_000)
    # Search slots of one tenant, across API processes (api/search_slots.py): a plain search
    # takes 1, one with substring filters or long in/nin lists up to 4.
    search_slots_per_tenant: int = Field(default=4, ge=0, le=1_000)
    # How long a search waits for its tenant's slots before its 429: a burst of one tenant's
    # searches queues behind its own running ones instead of failing at once.
    search_slot_wait_s: float = Field(default=2.0, ge=0, le=30)
    # Units of costly search work per second, per tenant (pipeline/serving/search_cost.py; 0: no
    # limit): what substring conditions, long in/nin lists, rerank and many hits add to a
    # search. A plain search costs none; the costliest filter allowed costs 8, so 8 lets a
    # tenant run it once a second (twice as much let one tenant's flood of them push another's
    # p95 to 1.7 times its quiet p95 on two cores: docs/BENCHMARKS.md, "Noisy neighbour").
    # Counted over the same windows as the rates above.
    search_cost_per_s: int = Field(default=8, ge=0, le=1_000_000)
    # How many memories mem0's page-number listing may skip to reach a page (it walks to it).
    page_walk_max: int = Field(default=10_000, ge=100, le=1_000_000)
    # How long an API process trusts a tenant key it has read (0: read it on every request).
    # A revocation is seen at once by the process that made it, within this by the others.
    key_cache_s: float = Field(default=5.0, ge=0, le=300)
    # While Elasticsearch cannot be reached, a key read within this many seconds still
    # authenticates (its revocation could not be recorded either), so adds keep being accepted.
    key_stale_s: float = Field(default=3600.0, ge=0, le=86_400)
    # Tenants named in /metrics' per-tenant usage (by tokens used); the rest are one "_other".
    usage_metrics_tenants: int = Field(default=100, ge=0, le=10_000)

    @field_validator("admin_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 24:
            raise ValueError("the admin key needs at least 24 characters")
        return value


class WebhookConfig(_Section):
    """Outgoing job webhooks (``webhook_url``). Loopback, private, link-local and reserved
    addresses are refused unless ``allow`` lists them: comma-separated addresses or networks,
    each with an optional port (``10.1.0.0/16,127.0.0.1:9000,[::1]:9000``). With a
    ``signing_secret`` every delivery is signed with a key of the tenant's own."""

    allow: str = ""
    signing_secret: SecretStr | None = None
    timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("allow")
    @classmethod
    def _allow_list_parses(cls, value: str) -> str:
        from pipeline.features.webhook import parse_allow_list

        parse_allow_list(value)  # ValueError names the bad entry
        return value


class FlowerConfig(_Section):
    """The Flower dashboard. It can revoke tasks and shut workers down, so it never runs without
    a login: ``basic_auth`` is ``user:password[,user2:password2]`` (``ops/up`` generates one)."""

    host: str = "127.0.0.1"
    port: int = Field(default=5555, ge=1, le=65535)
    basic_auth: SecretStr | None = None

    @field_validator("basic_auth")
    @classmethod
    def _pairs(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        for pair in value.get_secret_value().split(","):
            user, _, password = pair.partition(":")
            if not user or len(password) < 12:
                raise ValueError("needs user:password pairs, each password at least 12 characters")
        return value


class LogConfig(_Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # auto: JSON lines when stderr is not a terminal (a log file, a container), text on one
    format: Literal["auto", "json", "text"] = "auto"


class McpConfig(_Section):
    """``memq mcp`` (the stdio MCP server): the tenant key it acts with (``MEMQ_MCP_KEY``)."""

    key: SecretStr | None = None


class Settings(BaseSettings):
    """All of memq's configuration. Build it once (``Settings()``) and pass it down."""

    model_config = SettingsConfigDict(
        env_prefix="MEMQ_",
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="ignore",
        frozen=True,
    )

    es: ElasticsearchConfig = ElasticsearchConfig()
    redis: RedisConfig = RedisConfig()
    llm: LLMConfig = LLMConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    queues: QueueConfig = QueueConfig()
    worker: WorkerConfig = WorkerConfig()
    search: SearchConfig = SearchConfig()
    rerank: RerankConfig = RerankConfig()
    chat: ChatConfig = ChatConfig()
    api: ApiConfig = ApiConfig()
    flower: FlowerConfig = FlowerConfig()
    log: LogConfig = LogConfig()
    mcp: McpConfig = McpConfig()
    webhook: WebhookConfig = WebhookConfig()
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY", "MEMQ_OPENAI_API_KEY")
    )
    # OpenTelemetry's own variable: traces are exported only when it is set
    otel_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        ),
    )

    @field_validator("openai_api_key", mode="before")
    @classmethod
    def _blank_key_is_no_key(cls, value: object) -> object:
        """``OPENAI_API_KEY=`` (compose passes an unset variable so) means no key."""
        return None if isinstance(value, str) and not value.strip() else value

    def llm_api_key(self) -> SecretStr | None:
        """The LLM key: ``MEMQ_LLM_API_KEY`` first, else ``OPENAI_API_KEY``; a blank one is
        no key."""
        for key in (self.llm.api_key, self.openai_api_key):
            if key is not None and key.get_secret_value().strip():
                return key
        return None

    def llm_configured(self) -> bool:
        """Whether there is an LLM to call: a base URL, or a key for the default endpoint.
        ``pipeline.ingestion.capability`` decides from it which adds can run."""
        return bool(self.llm.base_url and self.llm.base_url.strip()) or (
            self.llm_api_key() is not None
        )
