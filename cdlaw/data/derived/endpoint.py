"""The endpoint backend of `cdlaw paraphrase` and `cdlaw distill`: any OpenAI-compatible
server.

`vllm serve`, SGLang and llama.cpp's `llama-server` all answer GET /v1/models and POST
/v1/chat/completions and /v1/completions. At start the server must answer and serve the
model, or BadInput says so before anything is written. A one-token chat request then
checks that the server can format the model's chat; a server that refuses it (a model
without a chat template) is sent plain prompts on /v1/completions instead, the local
backend's fallback, and one warning says so. Continuations (no instruction) always go to
/v1/completions, the text itself as the prompt.

Requests run `concurrency` at a time in threads and their answers are handed back in
document order. Each carries a seed made from (document, pass, piece), so a rerun or a
resumed job gets the same text where the server honours seeds (vLLM, SGLang and
llama.cpp do). Connection errors, 408, 429 and 5xx answers are retried with exponential
backoff (or after the server's Retry-After); a request that still fails raises
EndpointError, the rows before it stay written, and the same command continues the job.

The server's tokenizer is not at hand, so long documents are cut counting a token per
three characters (English BPE averages about four) against the context that /v1/models
reports as `max_model_len` (vLLM, SGLang), or 4096 when it reports none.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

from cdlaw.data.derived.prompts import (
    Chunks,
    Item,
    answer_text,
    plain_prompt,
    request_text,
    seed_of,
)
from cdlaw.system.errors import BadInput

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
MAX_WAIT = 60.0  # seconds: the longest pause between two tries
CHARS_PER_TOKEN = 3
DEFAULT_CONTEXT = 4096
TEMPLATE_SLACK = 32  # tokens a chat template may add around the message
SEED_SPAN = 2**31  # servers keep the seed in a signed integer


class EndpointError(RuntimeError):
    """The server stopped answering mid-job; the rows before the failed one are kept."""


class ApproxTokens:
    """A stand-in tokenizer for split_text: a token per CHARS_PER_TOKEN characters."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        step = CHARS_PER_TOKEN
        return SimpleNamespace(input_ids=[text[i : i + step] for i in range(0, len(text), step)])

    def decode(self, ids: list[str]) -> str:
        return "".join(ids)


@dataclass
class Reply:
    """A server's answer: status 0 means none came (refused, reset or timed out)."""

    status: int
    body: object
    retry_after: float | None = None

    def reason(self) -> str:
        """A short account of a failure, for messages."""
        body = self.body
        if isinstance(body, dict):  # OpenAI {"error": {"message"}} or vLLM {"message"}
            error = body.get("error")
            body = (error.get("message") if isinstance(error, dict) else error) or body.get(
                "message", body
            )
        text = " ".join(str(body).split())[:200]
        return f"HTTP {self.status}: {text}" if self.status else f"no answer: {text}"


def exchange(method: str, url: str, body: dict | None, headers: dict, timeout: float) -> Reply:
    """One HTTP request with a JSON body; never raises for HTTP or network failures."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **headers}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return Reply(r.status, _parse(r.read()))
    except urllib.error.HTTPError as e:
        return Reply(e.code, _parse(e.read()), _seconds(e.headers.get("Retry-After")))
    except (OSError, http.client.HTTPException) as e:  # URLError, refused, reset, timeout
        return Reply(0, getattr(e, "reason", None) or e)


def _parse(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None


@dataclass
class Endpoint:
    """An OpenAI-compatible server serving `model`; `api` is the path requests go to."""

    base: str
    model: str
    concurrency: int
    headers: dict[str, str] = field(default_factory=dict)
    api: str = "chat/completions"
    context: int = DEFAULT_CONTEXT
    timeout: float = 600.0  # seconds for one request: a busy server queues them
    retries: int = 6  # tries after the first: 1 + 2 + … + 32 s ≈ a minute of waiting
    backoff: float = 1.0
    tokens: ApproxTokens = field(default_factory=ApproxTokens)

    @classmethod
    def connect(
        cls,
        url: str,
        model: str,
        api_key_env: str | None,
        concurrency: int,
        warn: Callable[[str], None],
        chat: bool = True,
        option: str = "--model",  # the option that named `model`, in messages
    ) -> Endpoint:
        """Check that the server answers and serves `model`; BadInput otherwise. With `chat`
        False (continuations only) the chat check is skipped: plain completions are asked."""
        base = url.rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise BadInput(f"--endpoint {url!r} must be an http(s) URL such as http://host:8000/v1")
        headers = {}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise BadInput(f"--api-key-env {api_key_env!r} names an unset environment variable")
            headers["Authorization"] = f"Bearer {key}"
        server = cls(base, model, concurrency, headers)
        listing = server.send("GET", "/models", connecting=True)
        if listing.status != 200 or not isinstance(listing.body, dict):
            hint = " (does --endpoint end in /v1?)" if listing.status == 404 else ""
            raise BadInput(f"--endpoint {base} did not list its models ({listing.reason()}){hint}")
        served = {
            str(m.get("id")): m for m in listing.body.get("data") or [] if isinstance(m, dict)
        }
        if model not in served:
            names = ", ".join(sorted(served)) or "no model"
            raise BadInput(f"{option} {model!r} is not served by {base}, which serves {names}")
        server.context = int(served[model].get("max_model_len") or DEFAULT_CONTEXT)
        if chat:
            answer = server.send(
                "POST", "/chat/completions", server._body("Say OK.", 1, temperature=0),
                connecting=True,
            )  # fmt: skip
            if answer.status == 200:
                return server
            if answer.status == 0 or answer.status in RETRY_STATUS or answer.status in (401, 403):
                raise BadInput(f"--endpoint {base} failed a first request ({answer.reason()})")
        server.api = "completions"
        plain = server.send(
            "POST", "/completions", server._body("Say OK.", 1, temperature=0), connecting=True
        )
        if plain.status != 200:
            refused = f"chat ({answer.reason()}) and plain completion" if chat else "completion"
            raise BadInput(
                f"--endpoint {base} refused {refused} requests ({plain.reason()}) for {model!r}"
            )
        if chat:
            warn(
                f"{base} refused a chat request for {model!r} ({answer.reason()}), so it gets "
                "plain prompts on /v1/completions (a model without a chat template?)"
            )
        return server

    def prompt_tokens(self, instruction: str | None) -> int:
        """Tokens a request takes beyond its text: the instruction and the chat template's
        slack (counted a token per CHARS_PER_TOKEN characters); a continuation none."""
        if instruction is None:
            return 0
        return TEMPLATE_SLACK + len(self.tokens(plain_prompt(instruction, "")).input_ids)

    def generate(
        self, items: Iterable[Item], max_new_tokens: int, temperature: float, seed: int
    ) -> Chunks:
        """Answers in item order, `concurrency` requests at a time."""
        stop = threading.Event()  # set when the job ends early: waiting tries give up

        def answer(it: Item) -> str:
            texts = []
            for j, piece in enumerate(it.pieces):
                sampling = {"top_p": 0.95} if temperature else {}  # as the local backend
                body = self._body(
                    self._request(it.instruction, piece), max_new_tokens, temperature=temperature,
                    **sampling, seed=(seed_of(seed, it.doc_id, it.k) + j) % SEED_SPAN,
                )  # fmt: skip
                reply = self.send("POST", f"/{self.api}", body, stop)
                if reply.status != 200:
                    raise EndpointError(
                        f"{self.base} failed document {it.doc_id!r} pass {it.k} "
                        f"({reply.reason()}); the rows before it are kept, and the same "
                        "command continues the job"
                    )
                texts.append(self._text(reply))
            return answer_text(it, texts)

        # Twice the concurrency in flight keeps the server busy while the head finishes.
        window: deque[tuple[Item, Future]] = deque()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="cdlaw-generate")
        try:
            for it in items:
                window.append((it, pool.submit(answer, it)))
                if len(window) >= 2 * self.concurrency:
                    yield _answered_head(window)
            while window:
                yield _answered_head(window)
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _request(self, instruction: str | None, piece: str) -> str:
        """The text sent: a chat message, a plain prompt, or a continuation's own text."""
        if instruction is None:
            return piece
        if self.api == "chat/completions":
            return request_text(instruction, piece)
        return plain_prompt(instruction, piece)

    def send(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        stop: threading.Event | None = None,
        connecting: bool = False,
    ) -> Reply:
        """A request, tried again after 408, 429, 5xx or a lost connection, waiting 1, 2,
        4, … s. While connecting, no answer at all is final: a wrong address, not a hiccup."""
        wait = stop or threading.Event()
        timeout = min(self.timeout, 60.0) if connecting else self.timeout
        for attempt in range(self.retries + 1):
            reply = exchange(method, self.base + path, body, self.headers, timeout)
            again = reply.status in RETRY_STATUS or (reply.status == 0 and not connecting)
            if not again or attempt == self.retries:
                break
            pause = reply.retry_after
            if pause is None:  # jittered, so concurrent tries do not return together
                pause = self.backoff * 2**attempt * random.uniform(0.5, 1.0)
            if wait.wait(min(pause, MAX_WAIT)):
                break
        return reply

    def _body(self, text: str, max_tokens: int, **sampling) -> dict:
        """The JSON asking for a completion of text: a chat message, or a plain prompt."""
        if self.api == "chat/completions":
            return {"model": self.model, "messages": [{"role": "user", "content": text}],
                    "max_tokens": max_tokens, **sampling}  # fmt: skip
        return {"model": self.model, "prompt": text, "max_tokens": max_tokens, **sampling}

    def _text(self, reply: Reply) -> str:
        try:
            choice = reply.body["choices"][0]  # type: ignore[index]
            text = choice["message"]["content"] if "message" in choice else choice["text"]
        except (KeyError, IndexError, TypeError) as e:
            raise EndpointError(
                f"{self.base} answered without a completion: {reply.reason()}"
            ) from e
        return text or ""


def _answered_head(window: deque[tuple[Item, Future]]) -> list[tuple[Item, str]]:
    """The answered items at the window's head, in order (waiting for the first); a failed
    one raises when it is first, so the answers before it are written."""
    it, future = window.popleft()
    chunk = [(it, future.result())]
    while window and window[0][1].done() and window[0][1].exception() is None:
        it, future = window.popleft()
        chunk.append((it, future.result()))
    return chunk
