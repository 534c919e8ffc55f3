"""A loopback stand-in model for `winnow cib`: an OpenAI chat-completions server that reads.

    with StandIn() as model:
        Benchmark(CIBConfig(base_url=model.url, model="stand-in", ...)).run(out)

It answers each question from the context it is sent, deterministically: it reads the facts
of every message (the relation sentences of winnow.batch.cib.probes), follows the question's
relation path from its subject, and answers the entity it reaches. It degrades with
interference, not length: with k passages in the context that state one of the question's
relations about other entities, it follows a competitor instead of the gold fact with
probability k / (k + half_at), decided by a hash of the question and k (so the same request
always gets the same answer); filler costs it nothing. A missing supporting passage leaves it
guessing from a competitor, or answering "unknown".

It validates every request as the API would (tests/api_validate.py) and as the benchmark
promises (temperature 0, ...), and answers 400 with the problem; `faults` answers the first requests with those statuses (429,
503, ...) to exercise retries. `usage.prompt_tokens` is its own count, about four characters a
token: not winnow's tokenizer, as a real model's is not.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from typing import Any

from api_validate import validate_openai
from llm_server import LLMServer, RecordedRequest, Reply

from winnow.batch.cib.probes import QUESTION_PATTERNS, read_facts


class StandIn:
    def __init__(
        self,
        *,
        half_at: int = 12,
        delay: float = 0.0,
        faults: tuple[int, ...] = (),
        lifetime: float = 300.0,
    ):
        self.half_at = half_at
        self.delay = delay
        self.faults = list(faults)
        self.problems: list[str] = []  # requests it rejected, one line each
        self.answered = 0
        self._lock = threading.Lock()
        self.server = LLMServer(self._reply, lifetime=lifetime, model="stand-in")

    def __enter__(self) -> StandIn:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    @property
    def url(self) -> str:
        return self.server.openai_base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.server.requests

    # -- the model ---------------------------------------------------------------------------

    def _reply(self, rec: RecordedRequest) -> Reply:
        with self._lock:
            if self.faults:
                return Reply(status=self.faults.pop(0), text="try again later")
        body = rec.body
        problems = validate(body) if isinstance(body, dict) else ["body is not a JSON object"]
        if problems:
            self.problems += problems
            return Reply(status=400, text="; ".join(problems))
        if self.delay:
            time.sleep(self.delay)
        answer = self.answer(body["messages"])
        with self._lock:
            self.answered += 1
        return Reply(
            text=answer,
            usage={"prompt_tokens": prompt_tokens(body), "completion_tokens": 1 + len(answer) // 4},
        )

    def answer(self, messages: list[dict[str, Any]]) -> str:
        question = _question(messages)
        if question is None:
            return "I cannot tell what you are asking."
        path, subject = question
        facts: dict[tuple[str, str], str] = {}
        for m in messages:
            if m.get("role") == "system":
                continue
            for rel, s, o in read_facts(m.get("content") or ""):
                facts.setdefault((rel, s), o)
        gold: list[tuple[str, str]] = []  # the (relation, subject) steps of the question's path
        entity: str | None = subject
        for rel in path:
            if entity is None:
                break
            gold.append((rel, entity))
            entity = facts.get((rel, entity))
        competitors = [(r, s) for (r, s) in facts if r in path and (r, s) not in gold]
        k = len(competitors)
        digest = hashlib.sha256(f"{subject}|{'/'.join(path)}|{k}".encode()).digest()
        misled = int.from_bytes(digest[:8], "big") / 2**64 < k / (k + self.half_at)
        if entity is not None and not misled:
            return entity
        if not competitors:
            return "unknown"
        # follow the competitor most like the gold step it stands beside
        rel, start = max(
            competitors,
            key=lambda c: (c[0] == path[0], _common_prefix(c[1], subject), c[1]),
        )
        entity = facts[(rel, start)]
        for nxt in path[path.index(rel) + 1 :]:
            entity = facts.get((nxt, entity), entity)
        return entity


def _question(messages: list[dict[str, Any]]) -> tuple[tuple[str, ...], str] | None:
    """The question's relation path and subject, from the last line of the last message
    that is one (the text render sends the notes and the question in one message)."""
    for line in reversed((messages[-1].get("content") or "").splitlines()):
        for path, rx in QUESTION_PATTERNS:
            m = rx.fullmatch(line.strip())
            if m:
                return path, m["s"]
    return None


def _common_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def prompt_tokens(body: dict[str, Any]) -> int:
    """The stand-in's own count: four characters a token, four a message."""
    chars = 0
    for m in body["messages"]:
        chars += len(m.get("content") or "")
        for call in m.get("tool_calls") or ():
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"])
    chars += len(json.dumps(body.get("tools") or ""))
    return math.ceil(chars / 4) + 4 * len(body["messages"]) + 3


def validate(body: dict[str, Any]) -> list[str]:
    """What the chat-completions API would reject in this body (contract C3), and what the
    benchmark promises besides: temperature 0, a length cap, only declared tools, the user last."""
    problems = validate_openai(body)
    if body.get("temperature") != 0:
        problems.append(f"temperature: the benchmark sends 0, got {body.get('temperature')!r}")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: a positive integer")
    names = set()
    for t in body.get("tools") or ():
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            problems.append("tools: each a {type: function, function: {name, ...}}")
        elif fn.get("name"):
            names.add(fn["name"])
    if body.get("tool_choice") not in (None, "none", "auto", "required"):
        problems.append(f"tool_choice: unknown {body.get('tool_choice')!r}")
    messages = body.get("messages") or [{}]
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or ():
            if (call.get("function") or {}).get("name") not in names:
                problems.append(f"messages.{i}.tool_calls: a tool not declared in tools")
            try:
                json.loads((call.get("function") or {}).get("arguments", ""))
            except ValueError:
                problems.append(f"messages.{i}.tool_calls: arguments are not JSON")
        if m.get("role") in ("user", "system") and not (m.get("content") or "").strip():
            problems.append(f"messages.{i}.content: empty text")
    if messages[-1].get("role") != "user":
        problems.append("the last message must be the user's question")
    return problems
