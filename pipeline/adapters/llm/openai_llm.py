"""The LLM adapter: the official ``openai`` SDK against any OpenAI-compatible base URL.

Retries of a server that answers live here and only here (the SDK's own are off); one that
cannot be reached raises ``UnreachableError`` at once, for the task layer to retry against its
deadline. An answered ``TransientError`` is retried with
exponential backoff and full jitter, ``config.max_retries`` times, never sooner than a 429's
``Retry-After``; then ``RetriesExhaustedError`` tells the task layer not to retry again. Calls in
flight are bounded per process by an ``AdaptiveLimit`` (``config.max_concurrency`` at most;
a 429 drops it below the calls that were out). The SDK's exceptions become memq's in
``openai_errors``, which the embeddings client uses too.

Structured outputs: a call with a ``reply_model`` asks for ``response_format`` of type
``json_schema`` (the pydantic model's JSON schema, strict). A server that refuses it (a 4xx
naming ``response_format`` or ``json_schema``: older vLLM, llama.cpp builds, some gateways; or
llama-cpp-python's server, which answers its request validation errors with a 500 naming both) is
asked again in JSON mode with the schema beside it (``{"type": "json_object", "schema": ...}``,
which llama.cpp's server and llama-cpp-python's turn into a grammar the reply must follow), and,
should the server refuse that too, in plain JSON mode. The adapter remembers each refusal, so
each process pays for the discovery once; the parser's repair covers what JSON mode lets
through. A JSON reply the server
cut off (``finish_reason`` ``length``: ``config.max_tokens`` or the context window reached) is a
``PermanentError`` naming that, not a parse failure: asked again, the model writes the same.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from pydantic import BaseModel, SecretStr
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base, wait_random_exponential

from pipeline.adapters.llm.limiter import AdaptiveLimit
from pipeline.adapters.llm.parse import excerpt
from pipeline.config import LLMConfig
from pipeline.domain.protocols import ChatMessage, TokenUsage
from pipeline.errors import (
    ConfigurationError,
    PermanentError,
    RetriesExhaustedError,
    TransientError,
    UnreachableError,
)

_LOG = logging.getLogger("memq.llm")

# Self-hosted servers (vLLM, Ollama, llama.cpp) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "memq-no-key"
# 408 and 409 are the server asking us to come back later; the other 4xx will not change.
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_MESSAGE_CHARS = 500
MAX_RETRY_AFTER_S = 60.0  # a server asking for longer is waited for by the task layer instead
JSON_MODE: dict[str, Any] = {"type": "json_object"}
# A refusal of structured outputs is a client error that names the parameter.
_REFUSAL_STATUS = frozenset({400, 404, 415, 422})
_REFUSAL_WORDS = ("response_format", "json_schema", "structured output")


@dataclass(frozen=True)
class LLMCall:
    """One request to the model, as seen by an observer (metrics): how long it took, what it
    cost, and whether it answered (``ok``) or failed (``error``)."""

    seconds: float
    prompt_tokens: int
    completion_tokens: int
    outcome: Literal["ok", "error"]


LLMObserver = Callable[[LLMCall], None]


@dataclass(frozen=True)
class Backoff:
    """Wait before retry ``n`` (1-based): uniform in ``[0, min(max_s, initial_s * 2**(n-1))]``.

    Full jitter spreads workers that failed together, so they do not retry in lockstep.
    """

    initial_s: float = 0.5
    max_s: float = 8.0

    def wait(self) -> wait_base:
        """The tenacity wait strategy for this policy."""
        return wait_random_exponential(multiplier=self.initial_s, max=self.max_s)


DEFAULT_BACKOFF = Backoff()
NO_BACKOFF = Backoff(initial_s=0.0, max_s=0.0)  # tests: retry at once


class OpenAILLM:
    """``LLM`` over chat completions. Safe to share between threads; ``close()`` when done.

    Raises ``PermanentError`` when the request is refused (4xx other than 408/409/429),
    ``UnreachableError`` at once when the server cannot be reached (connection refused or
    reset), ``RetriesExhaustedError`` when the other transient failures (timeouts, 429, 5xx,
    empty or malformed replies) outlast ``config.max_retries`` retries, and
    ``ConfigurationError`` at construction when neither a key nor a base URL is given.
    """

    def __init__(
        self,
        config: LLMConfig,
        api_key: SecretStr | None,
        backoff: Backoff = DEFAULT_BACKOFF,
        observer: LLMObserver | None = None,
    ) -> None:
        self._config = config
        self._backoff = backoff
        self._observer = observer
        # None: not known yet; False: the server refused json_schema once (never asked again)
        self.structured_outputs: bool | None = None
        # the same for a schema beside JSON mode, asked only once json_schema was refused
        self.schema_in_json_mode: bool | None = None
        self.limit = AdaptiveLimit(config.max_concurrency)
        self._client = openai.OpenAI(
            api_key=_resolve_key(config, api_key),
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=0,
        )

    def complete_json(
        self,
        messages: Sequence[ChatMessage],
        reply_model: type[BaseModel] | None = None,
        usage: TokenUsage | None = None,
    ) -> str:
        """The raw text of a JSON reply (temperature 0) to ``messages``; not parsed. With
        ``reply_model``: structured outputs, unless this server refused them (see the module
        docstring); without: JSON mode."""
        wire = [_to_wire(message) for message in messages]
        if reply_model is not None and self.structured_outputs is not False:
            schema = json_schema_format(reply_model)
            try:
                text = self._with_retries(lambda: self._create(wire, schema, usage))
            except PermanentError as exc:
                if not refuses_structured_outputs(exc):
                    raise
                self.structured_outputs = self._refused(
                    self.structured_outputs, "structured outputs", "JSON mode", exc
                )
            else:
                self.structured_outputs = True
                return text
        if reply_model is not None and self.schema_in_json_mode is not False:
            constrained = json_mode_format(reply_model)
            try:
                text = self._with_retries(lambda: self._create(wire, constrained, usage))
            except PermanentError as exc:
                if not refuses_structured_outputs(exc, "schema"):
                    raise
                self.schema_in_json_mode = self._refused(
                    self.schema_in_json_mode, "a schema in JSON mode", "plain JSON mode", exc
                )
            else:
                self.schema_in_json_mode = True
                return text
        return self._with_retries(lambda: self._create(wire, JSON_MODE, usage))

    def describe_image(self, image_url: str, prompt: str, usage: TokenUsage | None = None) -> str:
        """The model's text answer to ``prompt`` about the image at ``image_url``."""
        message = ChatMessage(role="user", content=prompt, image_url=image_url)
        wire = [_to_wire(message)]
        return self._with_retries(lambda: self._create(wire, None, usage))

    def _refused(
        self, known: bool | None, refused: str, fallback: str, exc: PermanentError
    ) -> Literal[False]:
        """A refusal remembered: the new value of its flag (``known``, the flag's value now:
        the warning is logged by the first call to meet the refusal only)."""
        if known is not False:
            _LOG.warning(
                "LLM %s refused %s (%s); using %s from now on",
                self._config.model,
                refused,
                exc.reason,
                fallback,
            )
        return False

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAILLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _create(
        self,
        wire: list[ChatCompletionMessageParam],
        response_format: dict[str, Any] | None,
        usage: TokenUsage | None,
    ) -> str:
        """One request, no retry, within the concurrency limit: the reply text, or a memq
        error. The server's token counts go to ``usage`` and, with the latency, to the
        observer."""
        extra: dict[str, Any] = {"response_format": response_format} if response_format else {}
        if self._config.max_tokens is not None:
            extra["max_tokens"] = self._config.max_tokens
        started = time.perf_counter()
        with self.limit.slot():
            try:
                with openai_errors(f"LLM {self._config.model}"):
                    completion = self._client.chat.completions.create(
                        model=self._config.model, messages=wire, temperature=0, **extra
                    )
            except TransientError as exc:
                if exc.throttled:
                    self.limit.throttled()
                self._observe(started, None, "error")
                raise
            except PermanentError:
                self._observe(started, None, "error")
                raise
        self.limit.succeeded()
        tokens = _tokens(completion)
        if usage is not None:
            usage.add(*tokens)
        self._observe(started, tokens, "ok")
        text = _reply_text(completion)
        if response_format is not None:
            _check_whole(completion, text, self._config.max_tokens)
        return text

    def _observe(
        self, started: float, tokens: tuple[int, int] | None, outcome: Literal["ok", "error"]
    ) -> None:
        if self._observer is None:
            return
        prompt, completion = tokens or (0, 0)
        self._observer(LLMCall(time.perf_counter() - started, prompt, completion, outcome))

    def _with_retries(self, call: Callable[[], str]) -> str:
        """``call()``, retrying a ``TransientError`` from a server that answered; then
        ``RetriesExhaustedError``. An ``UnreachableError`` is raised at once: the task layer
        retries it against its deadline (one layer per failure)."""
        attempts = self._config.max_retries + 1
        retrying = Retrying(
            retry=retry_if_exception(_answered_transient),
            stop=stop_after_attempt(attempts),
            wait=_not_before_retry_after(self._backoff.wait()),
            before_sleep=_log_retry,
            reraise=True,  # the last TransientError itself, not tenacity's RetryError
        )
        try:
            return retrying(call)
        except UnreachableError:
            raise
        except TransientError as exc:
            reason = f"LLM call failed after {attempts} attempt(s); last error: {exc.reason}"
            raise RetriesExhaustedError(reason) from exc


@lru_cache(maxsize=32)
def json_schema_format(reply_model: type[BaseModel]) -> dict[str, Any]:
    """``response_format`` asking for JSON that matches ``reply_model`` (strict: the model
    must forbid extra keys and leave no field optional, as OpenAI's strict mode requires)."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": reply_model.__name__,
            "schema": reply_model.model_json_schema(),
            "strict": True,
        },
    }


@lru_cache(maxsize=32)
def json_mode_format(reply_model: type[BaseModel]) -> dict[str, Any]:
    """JSON mode with ``reply_model``'s schema beside it: llama.cpp's servers constrain the
    reply to it; a server that ignores the key gives plain JSON mode."""
    return {"type": "json_object", "schema": reply_model.model_json_schema()}


def refuses_structured_outputs(exc: PermanentError, what: str = "json_schema") -> bool:
    """True when ``exc`` is the server refusing the ``response_format`` asked (``what``: the
    ``json_schema`` type, or the ``schema`` beside JSON mode; see ``_refusal``)."""
    cause = exc.__cause__
    return isinstance(cause, openai.APIStatusError) and _refusal(cause, what)


def _refusal(exc: openai.APIStatusError, what: str) -> bool:
    """A client error whose message names the parameter (not a bad key, a wrong model, or a
    prompt too long); or a 500 naming both ``response_format`` and ``what``:
    llama-cpp-python's server reports its request validation errors as 500s, and this one
    will not pass by retrying."""
    text = f"{exc.message} {exc.body}".lower()
    if exc.status_code in _REFUSAL_STATUS:
        return any(word in text for word in (*_REFUSAL_WORDS, what))
    return exc.status_code == 500 and "response_format" in text and what in text


def _tokens(completion: object) -> tuple[int, int]:
    """(prompt, completion) tokens the server reported; (0, 0) when it reported none."""
    usage = completion.usage if isinstance(completion, ChatCompletion) else None
    if usage is None:
        return 0, 0
    return usage.prompt_tokens or 0, usage.completion_tokens or 0


def _answered_transient(error: BaseException) -> bool:
    return isinstance(error, TransientError) and not isinstance(error, UnreachableError)


def _not_before_retry_after(backoff: wait_base) -> Callable[[RetryCallState], float]:
    """The backoff, but never less than what the server asked for in ``Retry-After``."""

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(error, "retry_after_s", None) or 0.0
        return max(float(backoff(state)), min(float(asked), MAX_RETRY_AFTER_S))

    return wait


def _resolve_key(config: LLMConfig, api_key: SecretStr | None) -> str:
    """The key to send. Always a string, so the SDK never reads the environment itself."""
    if api_key is not None:
        return api_key.get_secret_value()
    if config.base_url is not None:
        return _PLACEHOLDER_KEY
    raise ConfigurationError(
        "no LLM API key: set MEMQ_LLM_API_KEY or OPENAI_API_KEY, or MEMQ_LLM_BASE_URL "
        "for a self-hosted server"
    )


def _to_wire(message: ChatMessage) -> ChatCompletionMessageParam:
    """The SDK's message dict; a message with ``image_url`` becomes text + image parts."""
    if message.image_url is None:
        return cast(ChatCompletionMessageParam, {"role": message.role, "content": message.content})
    parts = [
        {"type": "text", "text": message.content},
        {"type": "image_url", "image_url": {"url": message.image_url}},
    ]
    return cast(ChatCompletionMessageParam, {"role": message.role, "content": parts})


def _reply_text(completion: object) -> str:
    """The first choice's text. A missing, empty or non-completion reply is transient."""
    # The SDK hands back the raw body as a str when a server answers 200 with non-JSON.
    if not isinstance(completion, ChatCompletion):
        raise TransientError("LLM answered 200 with a body that is not a completion")
    content = completion.choices[0].message.content if completion.choices else None
    if content is None or not content.strip():
        raise TransientError("LLM returned an empty reply")
    return content


def _check_whole(completion: object, text: str, max_tokens: int | None) -> None:
    """``PermanentError`` when the server stopped a JSON reply at a length limit: what it
    wrote is a prefix that no repair can complete honestly."""
    ended = completion.choices[0].finish_reason if isinstance(completion, ChatCompletion) else None
    if ended != "length":
        return
    limit = f"MEMQ_LLM_MAX_TOKENS={max_tokens}" if max_tokens else "the server's or the context's"
    raise PermanentError(
        f"LLM reply was cut off at its length limit ({limit}) before its JSON was complete: "
        f"{excerpt(text)}"
    )


@contextmanager
def openai_errors(what: str) -> Iterator[None]:
    """The one place the SDK's exceptions become memq's (``raise ... from exc``)."""
    try:
        yield
    except openai.APITimeoutError as exc:  # reached, but slow: worth a quick retry at the call
        raise TransientError(f"{what}: {type(exc).__name__}: {exc.message}") from exc
    except openai.APIConnectionError as exc:
        raise UnreachableError(f"{what}: {type(exc).__name__}: {exc.message}") from exc
    except openai.APIStatusError as exc:
        raise _status_error(what, exc) from exc
    except json.JSONDecodeError as exc:  # a 200 whose JSON body is broken
        raise TransientError(f"{what}: reply body is not valid JSON ({exc})") from exc
    except openai.OpenAIError as exc:
        raise PermanentError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _status_error(what: str, exc: openai.APIStatusError) -> TransientError | PermanentError:
    status = exc.status_code
    reason = f"{what}: HTTP {status}: {_server_message(exc)}"
    if (status >= 500 or status in _RETRYABLE_STATUS) and not _refusal(exc, "schema"):
        return TransientError(reason, retry_after_s=_retry_after(exc), throttled=status == 429)
    return PermanentError(reason)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """``Retry-After`` in seconds (the delta-seconds form; an HTTP date is not honoured)."""
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own words (``error.message`` of the body), else the SDK's summary."""
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else body
    text = message if isinstance(message, str) and message else exc.message
    return text[:_MAX_MESSAGE_CHARS]


def _log_retry(state: RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    wait_s = state.next_action.sleep if state.next_action is not None else 0.0
    _LOG.warning(
        "LLM call attempt %d failed (%s); retrying in %.2fs",
        state.attempt_number,
        getattr(error, "reason", error),
        wait_s,
    )
