"""What fills the window: the arms of the benchmark, as agent transcripts, and their requests.

    builder = ContextBuilder(window=128_000)
    units = builder.distractor(probe, bucket=50)   # question + supporting + competing passages
    filler = builder.filler(probe, units)          # the same, competing passages -> filler
    small = builder.compress(units, "winnow", budget=10)
    body = builder.request(units, render="tools")  # {"messages", "tools", ...}

A context is a transcript, as winnow sees a coding agent's: the user asks the agent to read a
folder of notes, each passage comes back as the result of one `read_file` call, and the
question is the user's last message. Every arm of one (probe, bucket) has the same units in
the same places; only the texts of the competing passages differ (distractors, or filler of
the same token length), and the supporting passages sit at the same relative positions at
every bucket. The system prompt is outside the transcript: no compression method touches it.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.batch.cib.probes import Probe, filler_text
from winnow.data.schema import Unit
from winnow.serving.tokens import TokenCounter, default_token_counter

SYSTEM_PROMPT = (
    "You are a careful research assistant. You have read the notes the user asked you to "
    "read; answer the user's question from them. Reply with the answer only: the name, "
    "without a sentence around it."
)
TASK = (
    "Please read the notes in the notes/ folder one by one. When you are done I will ask you "
    "a question about them."
)
QUESTION = "{question}\nAnswer with the name only."
TOOL = "read_file"
TOOL_DEF = {
    "type": "function",
    "function": {
        "name": TOOL,
        "description": "Read a file of the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
RENDERS = ("tools", "text")
METHODS = ("winnow", "truncation", "masking")
REQUEST_OVERHEAD = 3  # every reply is primed with a few tokens (OpenAI's documented figure)

MADE_PROBES = 64  # probes whose passages and filler are kept for the next bucket


@dataclass
class _Made:
    """One probe's competing passages (text, own, tokens as a note) and their filler, made
    once for every bucket: a bucket's context extends the one below it."""

    probe: Probe
    stream: Iterator[tuple[str, bool]]
    passages: list[tuple[str, bool, int]] = field(default_factory=list)
    fillers: dict[tuple[str, int], str] = field(default_factory=dict)


class ContextBuilder:
    """Builds each arm's transcript for a probe at a bucket (a target share of the window)."""

    def __init__(
        self,
        window: int,
        *,
        counter: TokenCounter | None = None,
        pool: Sequence[Probe] = (),
        render: str = "tools",
    ):
        if render not in RENDERS:
            raise ValueError(f"render must be one of {RENDERS}")
        self.window = window
        self.counter = counter or default_token_counter()
        self.render = render
        self.pool = list(pool)  # a probe file's other probes: passages once its own run out
        self.fixed = self.counter.count(SYSTEM_PROMPT) + 4 + REQUEST_OVERHEAD
        if render == "tools":
            self.fixed += self.counter.count(json.dumps(TOOL_DEF))
        self._compressor: Any = None
        self._made: OrderedDict[str, _Made] = OrderedDict()
        self._call_tokens: dict[str, int] = {}  # a call's text (one per note path) -> tokens

    def target(self, bucket: float) -> int:
        """The request tokens a bucket (percent of the window) aims at."""
        return int(self.window * bucket / 100)

    # -- arms ------------------------------------------------------------------------------

    def distractor(self, probe: Probe, bucket: float) -> list[Unit]:
        """The question, its supporting passages, and as many competing passages as fill the
        bucket: the probe's own distractors first, then (for a probe file) other probes'."""
        head = [self._text(probe, 0, "user", TASK)]
        question = self._text(probe, 1, "user", QUESTION.format(question=probe.question))
        support = [self._pair(probe, f"s{k}", p) for k, p in enumerate(probe.supporting)]
        base = _numbered(head + [u for pair in support for u in pair] + [question])
        budget = self.target(bucket) - self.tokens(base)
        fill: list[list[Unit]] = []
        for j, (text, own, n) in enumerate(self._passages(probe)):
            if n > budget:
                break
            budget -= n
            fill.append(self._pair(probe, f"d{j}", text, own=own))
        # the supporting passages keep their relative places at every bucket
        rng = random.Random(f"cib-positions:{probe.id}")
        places = sorted((rng.random(), k) for k in range(len(support)))
        order = rng.sample(range(len(support)), len(support))
        body = list(fill)
        for (f, _k), idx in sorted(zip(places, order), reverse=True):
            body.insert(round(f * len(fill)), support[idx])
        units = head + [u for pair in body for u in pair] + [question]
        return _numbered(units)

    def filler(self, probe: Probe, units: Sequence[Unit]) -> list[Unit]:
        """The same transcript with each competing passage replaced by irrelevant prose of the
        same token length (the same prose at every bucket)."""
        out = []
        made = self._made_for(probe)
        for u in units:
            key = u.extra.get("cib_passage")
            if u.kind == "tool_result" and isinstance(key, str) and key.startswith("d"):
                n = self.counter.count(u.text)
                text = made.fillers.get((key, n))
                if text is None:
                    text = filler_text(n, f"{probe.id}:{key}", self.counter)
                    made.fillers[key, n] = text
                u = Unit(**{**_fields(u), "text": text, "extra": {**u.extra, "cib_filler": True}})
            out.append(u)
        return out

    def compress(self, units: Sequence[Unit], method: str, budget: float) -> list[Unit]:
        """The transcript under `budget` percent of the window (the request as a whole), by
        winnow's SemanticCompressor or a baseline."""
        limit = self.target(budget) - self.fixed
        if method == "winnow":
            if self._compressor is None:
                from winnow.serving import CompressorConfig, SemanticCompressor

                # as scripts/bench_ab.py measures it: the budget is met even when the units
                # the classifier calls must-keep exceed it (they are summarized, largest first)
                config = CompressorConfig(on_must_keep_overflow="summarize_largest")
                self._compressor = SemanticCompressor(token_counter=self.counter, config=config)
            return list(self._compressor.compress(list(units), token_limit=limit).units)
        if method == "truncation":
            from winnow.serving.baselines import truncate_oldest

            return truncate_oldest(units, limit, self.counter)
        if method == "masking":
            from winnow.serving.baselines import mask_observations

            return mask_observations(units, limit, self.counter)
        raise ValueError(f"unknown compression method {method!r}; one of {METHODS}")

    # -- requests --------------------------------------------------------------------------

    def request(self, units: Sequence[Unit]) -> dict[str, Any]:
        """The chat-completions body (messages, and tools for the `tools` render)."""
        system = {"role": "system", "content": SYSTEM_PROMPT}
        if self.render == "text":
            return {"messages": [system, {"role": "user", "content": _as_text(units)}]}
        from winnow.serving.render import to_openai

        body = to_openai(units, tools=[TOOL_DEF])
        body["messages"].insert(0, system)
        body["tool_choice"] = "none"  # the documents are read: answer, do not call a tool
        return body

    def tokens(self, units: Sequence[Unit]) -> int:
        """`request_tokens(request(units))` of a transcript this builder made (`distractor`,
        `filler`), counted without rendering the request: what `--plan` adds up."""
        if self.render == "text":
            return self.fixed + 4 + self.counter.count(_as_text(units))
        n = self.fixed
        for u in units:
            n += 4  # a message each: the user's, the call's (no content), the result's
            if u.kind == "tool_call":  # a read_file call: its arguments sent as compact JSON
                n += self._call_tokens.get(u.text) or self._count_call(u.text)
            else:
                n += self.counter.count(u.text)
        return n

    def _count_call(self, text: str) -> int:
        arguments = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
        n = self._call_tokens[text] = self.counter.count(TOOL) + self.counter.count(arguments)
        return n

    def request_tokens(self, body: dict[str, Any]) -> int:
        """The request's own token count by winnow's counter (the endpoint's may differ)."""
        n = REQUEST_OVERHEAD
        for m in body["messages"]:
            n += 4 + self.counter.count(m.get("content") or "")
            for call in m.get("tool_calls") or ():
                fn = call["function"]
                n += self.counter.count(fn["name"]) + self.counter.count(fn["arguments"])
        for tool in body.get("tools") or ():
            n += self.counter.count(json.dumps(tool))
        return n

    # -- parts -----------------------------------------------------------------------------

    def _made_for(self, probe: Probe) -> _Made:
        made = self._made.get(probe.id)
        if made is None or made.probe is not probe:
            made = self._made[probe.id] = _Made(probe, self._competitors(probe))
            if len(self._made) > MADE_PROBES:
                self._made.popitem(last=False)
        self._made.move_to_end(probe.id)
        return made

    def _passages(self, probe: Probe) -> Iterator[tuple[str, bool, int]]:
        """The competing passages in order, each with what it adds as a note: made once."""
        made = self._made_for(probe)
        i = 0
        while True:
            if i == len(made.passages):
                nxt = next(made.stream, None)
                if nxt is None:
                    return
                made.passages.append((*nxt, self._pair_tokens(nxt[0])))
            yield made.passages[i]
            i += 1

    def _competitors(self, probe: Probe) -> Iterator[tuple[str, bool]]:
        yield from ((t, True) for t in probe.distractor_stream())
        if not self.pool:
            return
        # the other probes' passages, starting after this probe's place: each used once
        ids = [p.id for p in self.pool]
        start = ids.index(probe.id) + 1 if probe.id in ids else 0
        for other in self.pool[start:] + self.pool[:start]:
            if other.id != probe.id:
                yield from ((t, False) for t in (*other.supporting, *other.distractors))

    def _text(self, probe: Probe, index: int, role: str, text: str) -> Unit:
        return Unit(
            id="", session_id=f"cib-{probe.id}", index=index, role=role, kind="text", text=text
        )

    def _pair(self, probe: Probe, key: str, text: str, own: bool = True) -> list[Unit]:
        """One `read_file` call and its result; `key` names the passage (s0.. supporting,
        d0.. competing, by their place in the probe's stream)."""
        extra = {"cib_passage": key} if own else {"cib_passage": key, "cib_pool": True}
        call = Unit(
            id="",
            session_id=f"cib-{probe.id}",
            index=0,
            role="assistant",
            kind="tool_call",
            text=json.dumps({"path": _path(0)}),  # numbered once the order is known
            tool_name=TOOL,
            extra=dict(extra),
        )
        result = Unit(**{**_fields(call), "role": "tool", "kind": "tool_result", "text": text})
        return [call, result]

    def _pair_tokens(self, text: str) -> int:
        """What one more note adds to the request, as `request_tokens` counts it."""
        if self.render == "text":
            return self.counter.count(f"[{_path(0)}]\n{text}") + 1  # and the blank line
        call = json.dumps({"path": _path(0)}, separators=(",", ":"))
        return 8 + self.counter.count(text) + self.counter.count(TOOL) + self.counter.count(call)


def _fields(u: Unit) -> dict[str, Any]:
    return {
        "id": u.id,
        "session_id": u.session_id,
        "index": u.index,
        "role": u.role,
        "kind": u.kind,
        "text": u.text,
        "tool_name": u.tool_name,
        "call_id": u.call_id,
        "extra": dict(u.extra),
    }


def _numbered(units: list[Unit]) -> list[Unit]:
    """Ids, indices, call ids and file paths by position (doc-0001 is the first note read)."""
    out = []
    doc = 0
    for i, u in enumerate(units):
        f = _fields(u)
        f.update(id=f"{u.session_id}:{i}", index=i)
        if u.kind == "tool_call":
            doc += 1
            f.update(call_id=f"call_{doc:04d}", text=json.dumps({"path": _path(doc)}))
        elif u.kind == "tool_result":
            f.update(call_id=f"call_{doc:04d}")
        out.append(Unit(**f))
    return out


def _path(doc: int) -> str:
    return f"notes/doc-{doc:04d}.md"


def _call_path(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except ValueError:  # a compressor's stand-in for the call
        return "note"
    return str(value.get("path", "note")) if isinstance(value, dict) else "note"


def _as_text(units: Sequence[Unit]) -> str:
    """One user message: each note under its path, the other messages as they are."""
    parts = []
    paths = {u.call_id: _call_path(u.text) for u in units if u.kind == "tool_call"}
    for u in units:
        if u.kind == "tool_call":
            continue
        if u.kind == "tool_result":
            parts.append(f"[{paths.get(u.call_id, 'note')}]\n{u.text}")
        else:
            parts.append(u.text)
    return "\n\n".join(parts)


__all__ = [
    "METHODS",
    "QUESTION",
    "RENDERS",
    "SYSTEM_PROMPT",
    "TASK",
    "TOOL",
    "ContextBuilder",
]
