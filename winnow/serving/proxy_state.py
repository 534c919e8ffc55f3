"""The proxy's memory of conversations: what each request becomes, and the compressed prefixes.

    rewriter = Rewriter(budget=80_000)
    plan = rewriter.plan("anthropic", body)      # plan.body is None: send the request unchanged

A request under the budget goes upstream unchanged. Over it, the history before the last
assistant turn is compressed and kept as a *prefix*: the compressed messages that stand for
the first `covered` messages of the conversation, memoized under the chained digest of those
messages. The next request of the conversation starts with the same messages, so it finds the
prefix by its own digests and is sent as `prefix + its new messages`, the prefix byte for byte
as before (a prompt-cache hit), with no compression work. When the request outgrows the budget
again, the messages since the prefix (but the recent tail) are compressed and appended to it
(the cache still holds everything before them), or, when the prefix has no room left, the
prefix and they are compressed anew together (one cache miss, then stable bytes again).

Digests ignore `cache_control` markers, which clients move from request to request.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from winnow.serving.proxy_compress import (
    CompressedBlock,
    compress_messages,
    default_compressor,
    message_tokens,
)
from winnow.serving.proxy_wire import (
    MARKER,
    Parsed,
    Scanner,
    dumps,
    hash_text,
    message_digest,
    parse_request,
    skip_space,
    text_digest,
    text_key,
)
from winnow.serving.render import CONTINUED, MAX_BREAKPOINTS, min_cacheable_tokens

__all__ = ["Plan", "Prefix", "Rewriter", "RewriterConfig", "leading_system"]

PROBE = 4096  # characters of a prefix's text by which a request is matched to it


@dataclass
class RewriterConfig:
    """How the budget is met, and how much state is kept.

    After a compression the request holds `target` of the budget, so that the next requests
    fit as they are; the raw tail holds at most `tail_share` of the budget (but always the last
    assistant turn and what follows it); a prefix compressed anew gets `compact_to` of the room
    left, so that later blocks can be appended to it for a while.
    """

    budget: int = 80_000
    target: float = 0.8
    tail_share: float = 0.3
    compact_to: float = 0.6
    min_room: float = 0.15  # append to the prefix only while this share of the room is free
    # The history never gets less than this share of the budget, even when the raw tail alone
    # is over it: compressed to nothing, it would lose the task and leave a request that starts
    # with the assistant (which the Messages API rejects), for a request over budget anyway.
    history_floor: float = 0.1
    max_prefixes: int = 256  # memoized prefixes, least recently used dropped first
    per_conversation: int = 2  # the newest prefixes of one conversation kept
    state_ttl_s: float = 3600.0  # a prefix unused this long is forgotten
    token_memo: int = 200_000  # message digests whose token counts are remembered


@dataclass
class Prefix:
    """Compressed messages that stand for the first `covered` messages of a conversation.

    Without messages it is a checkpoint of a conversation under the budget: the client's
    tokens of its first `covered` messages, so that the next request need not read them."""

    covered: int
    messages: list[dict[str, Any]] | None
    tokens: int
    tokens_before: int
    conversation: str
    hash: str  # digest of the bytes sent
    last_used: float = 0.0
    origin: str = "compress"  # or "idle": an idle compaction's summary
    uses: int = 0
    client_tokens: int = 0  # the client's tokens of the messages it stands for
    raw_len: int = 0  # the length of their text in the client's request...
    raw_hash: int | None = None  # ...its key (text_key)...
    probe: int | None = None  # ...and that of its first PROBE characters
    _variants: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def variant(self, marker: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
        """The messages with `marker` on their last block, and the JSON of each: made once per
        marker, so that every request sends the same objects and bytes."""
        key = dumps(marker)
        v = self._variants.get(key)
        if v is None:
            assert self.messages is not None, "a checkpoint is never sent"
            head = _with_marker(self.messages, marker) if marker else self.messages
            v = self._variants[key] = (head, [dumps(m) for m in head])
        return v


@dataclass
class Plan:
    """What one request becomes. `body` None: the request goes upstream unchanged."""

    api: str
    action: str  # passthrough | reuse | append | compact | idle | unchanged
    conversation: str
    body: dict[str, Any] | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    fixed: int = 0  # of tokens_in: the system prompt and tool definitions
    messages_in: int = 0
    messages_out: int = 0
    covered: int = 0
    prefix_hash: str | None = None
    changed: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # blocks the compression left out
    reason: str = ""
    digests: list[bytes] = field(default_factory=list)  # of the request's messages
    chains: list[bytes] = field(default_factory=list)  # chains[i]: of messages[:i]
    source: dict[str, Any] | None = None  # the request body as the client sent it
    data: bytes | None = None  # the bytes to send, when made from the client's own text
    text: str | None = None  # the client's text, when `source` was not read whole

    def request_body(self) -> dict[str, Any] | None:
        """The request body as the client sent it."""
        if self.source is None and self.text is not None:
            self.source = json.loads(self.text)
        return self.source


class Rewriter:
    """Plans each request against the memoized prefixes; thread-safe."""

    def __init__(
        self,
        config: RewriterConfig | None = None,
        *,
        compressor: Any = None,
        clock: Callable[[], float] = time.time,
        budget: int | None = None,
    ) -> None:
        self.config = config or RewriterConfig()
        if budget is not None:
            self.config.budget = budget
        self._compressor = compressor
        self.clock = clock
        self._prefixes: OrderedDict[bytes, Prefix] = OrderedDict()
        self._probes: dict[int, list[bytes]] = {}  # key of the first PROBE chars -> chains
        self._tokens: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._compress_lock = threading.Lock()  # one compression at a time: CPU-bound anyway

    @property
    def compressor(self) -> Any:
        if self._compressor is None:
            self._compressor = default_compressor()
        return self._compressor

    # -- the plan ------------------------------------------------------------------------------

    def plan_request(self, api: str, raw: bytes) -> Plan | None:
        """`plan` for request bytes; None when they hold no JSON object. The bytes of a
        rewritten request are the client's own but for the compressed prefix.

        When the request starts with the very text of a memoized prefix's messages (a growing
        conversation resent by the same client), that text is checked by one hash and not
        parsed: only what follows it is."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and api == "anthropic":
            try:
                plan = self._known(api, text)
            except (ValueError, IndexError):
                plan = None  # the full reader below says what is wrong, or reads it
            if plan is not None:
                return plan
        parsed = parse_request(raw, text)
        if not isinstance(parsed.body, dict):
            return None
        return self.plan(api, parsed.body, parsed)

    def plan(self, api: str, body: dict[str, Any], parsed: Parsed | None = None) -> Plan:
        """What to send for this request body (it is not changed)."""
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            return Plan(api, "unchanged", "", reason="no message list")
        if parsed is not None and parsed.body is body and parsed.spans is not None:
            text = parsed.text
            digests = [text_digest(text[a:b]) for a, b in parsed.spans]
        else:
            parsed = None
            digests = [message_digest(m) for m in msgs]
        chains = _chains(api, digests)
        start = leading_system(api, msgs)
        toks = [self._count(api, m, d) for m, d in zip(msgs, digests)]
        fixed = self._fixed(api, body) + sum(toks[:start])
        conv = _conversation_id(api, body, chains, start)
        plan = Plan(api, "passthrough", conv, digests=digests, chains=chains, source=body)
        plan.tokens_in = fixed + sum(toks[start:])
        plan.fixed = fixed
        plan.messages_in = plan.messages_out = len(msgs)
        entry = self._lookup(chains)
        if entry is not None and entry.probe is None and parsed is not None:
            self._raw_region(entry, parsed, None)  # a prefix made elsewhere (idle): findable now
            if entry.probe is not None:
                with self._lock:
                    self._probes.setdefault(entry.probe, []).append(chains[entry.covered])
        return self._decide(plan, body, msgs, toks, start, fixed, entry, parsed)

    def _known(self, api: str, text: str) -> Plan | None:
        """The plan of a request whose messages start with a memoized prefix's text, or None."""
        s = Scanner(text)
        s.take("{")
        body: dict[str, Any] = {}
        hit = None
        while s.peek() != "}":
            key = s.key()
            if key == "messages" and hit is None and s.peek() == "[":
                begin = s.i
                s.i += 1
                s.peek()
                hit = self._probe(text, s.i)
                if hit is None:
                    return None
                chain, entry = hit
                s.i += entry.raw_len
                if not s.more("]"):
                    return None  # nothing after the prefix: not a request of this conversation
                tail, spans = s.items()
                array = (begin, s.i)
            else:
                body[key] = s.value()
            if not s.more("}"):
                break
        s.end()
        if hit is None or "messages" in body:
            return None
        k = entry.covered
        body["messages"] = tail  # the client's messages after the prefix
        msgs: list[Any] = [None] * k + tail
        parsed = Parsed(body, text, [None] * k + spans, array)
        digests = [b""] * k + [text_digest(text[a:b]) for a, b in spans]
        chains = [b""] * k + _chains(api, digests[k:], chain)
        toks = [0] * k + [self._count(api, m, d) for m, d in zip(tail, digests[k:])]
        fixed = self._fixed(api, body)
        plan = Plan(api, "passthrough", entry.conversation, digests=digests, chains=chains)
        plan.tokens_in = fixed + entry.client_tokens + sum(toks)
        plan.fixed, plan.text = fixed, text
        plan.messages_in = plan.messages_out = len(msgs)
        with self._lock:
            if chain in self._prefixes:
                self._prefixes.move_to_end(chain)
            entry.last_used = self.clock()
        if self._has_prefix(entry.conversation, beyond=entry.covered if entry.messages else -1):
            return None  # a newer prefix may apply: the full reader finds it by its digests
        if entry.messages is None:  # a checkpoint
            if plan.tokens_in > self.config.budget:
                return None  # the budget is crossed: the full reader plans it
            plan.tokens_out = plan.tokens_in
            self._checkpoint(plan, parsed, toks, entry.client_tokens)
            return plan
        return self._decide(plan, body, msgs, toks, 0, fixed, entry, parsed, entry.client_tokens)

    def _decide(
        self,
        plan: Plan,
        body: dict[str, Any],
        msgs: list[Any],
        toks: list[int],
        start: int,
        fixed: int,
        entry: Prefix | None,
        parsed: Parsed | None,
        base_tokens: int = 0,  # the client's tokens of messages known only by `entry`
    ) -> Plan:
        api, cfg, budget = plan.api, self.config, self.config.budget
        if entry is None:
            k, prefix_tokens = start, 0
            if plan.tokens_in <= budget:
                plan.tokens_out = plan.tokens_in
                if api == "anthropic":
                    self._checkpoint(plan, parsed, toks, base_tokens)
                return plan
        else:
            k, prefix_tokens = entry.covered, entry.tokens
            total = fixed + prefix_tokens + sum(toks[k:])
            if total <= budget:
                return self._send(plan, body, msgs, start, entry, "reuse", total, fixed, parsed)
        t = self._cut(msgs, toks, k)
        tail = sum(toks[t:])
        room = int(cfg.target * budget) - fixed - tail
        block = msgs[k:t]
        with self._compress_lock:
            held = _strip_markers(entry.messages or []) if entry is not None else []
            if entry is not None and block and room - prefix_tokens >= cfg.min_room * room:
                part = compress_messages(api, block, room - prefix_tokens, self.compressor)
                joined = _join(api, held, part.messages)
                new = CompressedBlock(
                    joined, entry.tokens_before + part.tokens_before, 0, part.changed, part.dropped
                )
                action = "append"
            elif entry is not None or block:
                limit = max(int(max(0, room) * cfg.compact_to), int(cfg.history_floor * budget))
                new = compress_messages(api, held + block, limit, self.compressor)
                if entry is not None:
                    new.tokens_before = entry.tokens_before + sum(toks[k:t])
                action = "compact"
            else:
                plan.tokens_out = plan.tokens_in
                plan.reason = "over budget, but nothing before the last assistant turn"
                return plan
        if not new.messages or (
            t < len(msgs)
            and new.messages[-1].get("role") == "assistant"
            and msgs[t].get("role") == "assistant"
        ):
            # nothing left of the history, or it ends with the assistant (the compression left
            # out the last results) while the tail opens with it: the prefix closes with a user
            # turn of its own, so that the breakpoint on it closes every byte before the tail
            new.messages = [*new.messages, _stub(api)]
        new.tokens = sum(self._count(api, m, message_digest(m)) for m in new.messages)
        prefix = Prefix(
            covered=t,
            messages=new.messages,
            tokens=new.tokens,
            tokens_before=new.tokens_before,
            conversation=plan.conversation,
            hash=hash_text(dumps(new.messages), 8).hex(),
            client_tokens=base_tokens + sum(toks[start:t]),
        )
        self._raw_region(prefix, parsed, entry)
        self._store(plan.chains[t], prefix)
        plan.changed, plan.dropped = new.changed, new.dropped
        total = fixed + prefix.tokens + tail
        return self._send(plan, body, msgs, start, prefix, action, total, fixed, parsed)

    def remember_compacted(self, plan: Plan, messages: list[dict[str, Any]]) -> bytes:
        """After an idle compaction: `messages` (its summary, then the recent turns) stand for
        the client's messages of the request `plan` planned. Returns the key to `forget` it."""
        kept = _strip_markers(_join(plan.api, messages[:1], messages[1:]))
        prefix = Prefix(
            covered=len(plan.digests),
            messages=kept,
            tokens=self.count(plan.api, kept),
            tokens_before=plan.tokens_out,
            client_tokens=plan.tokens_in - plan.fixed,
            conversation=plan.conversation,
            hash=hash_text(dumps(kept), 8).hex(),
            origin="idle",
        )
        self._store(plan.chains[-1], prefix)
        return plan.chains[-1]

    def forget(self, chain: bytes) -> None:
        with self._lock:
            self._drop(chain)

    def count(self, api: str, messages: Sequence[dict[str, Any]]) -> int:
        """Tokens of provider messages, as plans count them."""
        return sum(self._count(api, m, message_digest(m)) for m in messages)

    def _send(
        self,
        plan: Plan,
        body: dict[str, Any],
        msgs: list[Any],
        start: int,
        prefix: Prefix,
        action: str,
        total: int,
        fixed: int,
        parsed: Parsed | None,
    ) -> Plan:
        tail = msgs[prefix.covered :]
        marker = None
        if plan.api == "anthropic":
            after: Sequence[Any] = tail
            if parsed is not None and parsed.spans is not None:
                after = [parsed.text[a:b] for a, b in parsed.spans[prefix.covered :]]
            marker = _marker_for(body, after, fixed + prefix.tokens)
        head, head_wire = prefix.variant(marker)
        out = [*msgs[:start], *_join(plan.api, head, tail)]
        plan.body = {**body, "messages": out}
        if parsed is not None and parsed.spans is not None:
            text, spans = parsed.text, parsed.spans
            known = dict(zip(map(id, head), head_wire))
            for i in (*range(start), *range(prefix.covered, len(msgs))):
                known[id(msgs[i])] = text[spans[i][0] : spans[i][1]]
            a, b = parsed.array
            parts = ",".join(known.get(id(m)) or dumps(m) for m in out)
            plan.data = (text[:a] + "[" + parts + "]" + text[b:]).encode()
        plan.messages_out = len(out)
        if prefix.origin == "idle" and prefix.uses == 0:
            action = "idle"
        prefix.uses += 1
        plan.action, plan.tokens_out, plan.covered = action, total, prefix.covered
        plan.prefix_hash = prefix.hash
        if total > self.config.budget:
            plan.reason = "over budget after compression: the last turn alone is larger"
        return plan

    def _checkpoint(
        self, plan: Plan, parsed: Parsed | None, toks: list[int], base_tokens: int
    ) -> None:
        """Remember the client's tokens of this request's messages but the newest ones (a
        message that carries a cache breakpoint loses it on a later request: its bytes change)."""
        if parsed is None or parsed.spans is None:
            return
        spans, text = parsed.spans, parsed.text
        k = len(spans) - 1  # never the newest message, nor any from the last marked one on
        for i in range(len(spans) - 1, -1, -1):
            if spans[i] is None:
                break
            if '"cache_control"' in text[spans[i][0] : spans[i][1]]:
                k = min(k, i)
        if k <= 0 or spans[k - 1] is None:
            return
        mark = Prefix(
            covered=k,
            messages=None,
            tokens=0,
            tokens_before=0,
            conversation=plan.conversation,
            hash="",
            client_tokens=base_tokens + sum(toks[:k]),
        )
        self._raw_region(mark, parsed, None)
        if mark.probe is not None:
            self._store(plan.chains[k], mark)

    # -- where the raw tail starts -------------------------------------------------------------

    def _cut(self, msgs: list[Any], toks: list[int], lo: int) -> int:
        """Where the raw tail starts: an assistant message after `lo`, at or before the last one
        (whose thinking must go back unchanged), the earliest whose tail fits `tail_share` of
        the budget, else the last. `lo` when there is none (nothing new to compress)."""
        cands = [i for i in range(lo + 1, len(msgs)) if msgs[i].get("role") == "assistant"]
        if not cands:
            return lo
        limit = self.config.tail_share * self.config.budget
        suffix = [0] * (len(msgs) + 1)
        for i in range(len(msgs) - 1, -1, -1):
            suffix[i] = suffix[i + 1] + toks[i]
        return next((i for i in cands if suffix[i] <= limit), cands[-1])

    # -- memo ----------------------------------------------------------------------------------

    def _raw_region(self, prefix: Prefix, parsed: Parsed | None, entry: Prefix | None) -> None:
        """Where the prefix's messages sit in the client's text: their length and hash, and the
        hash of their first PROBE characters, by which a later request finds the prefix."""
        if parsed is None or parsed.spans is None or prefix.covered == 0:
            return
        last = parsed.spans[prefix.covered - 1]
        if last is None:  # known only by the entry (a compaction with nothing new)
            if entry is not None and entry.covered == prefix.covered:
                prefix.raw_len, prefix.raw_hash, prefix.probe = (
                    entry.raw_len,
                    entry.raw_hash,
                    entry.probe,
                )
            return
        first = skip_space(parsed.text, parsed.array[0] + 1)  # the first message
        region = parsed.text[first : last[1]]
        if len(region) < PROBE or '"cache_control"' in region:
            return  # too short to be worth it; or a breakpoint the client will move: not yet
        prefix.raw_len = len(region)
        prefix.raw_hash = text_key(region)
        prefix.probe = text_key(region[:PROBE])

    def _probe(self, text: str, at: int) -> tuple[bytes, Prefix] | None:
        """The newest prefix whose messages' text starts `text` at `at`."""
        if len(text) < at + PROBE:
            return None
        with self._lock:
            chains = list(self._probes.get(text_key(text[at : at + PROBE]), ()))
        for chain in reversed(chains):
            entry = self._prefixes.get(chain)
            if entry is None or entry.raw_hash is None:
                continue
            end = at + entry.raw_len
            if end <= len(text) and text_key(text[at:end]) == entry.raw_hash:
                return chain, entry
        return None

    def _has_prefix(self, conversation: str, beyond: int) -> bool:
        """Whether the conversation has a prefix standing for more than `beyond` messages."""
        with self._lock:
            return any(
                p.messages is not None and p.conversation == conversation and p.covered > beyond
                for p in self._prefixes.values()
            )

    def _lookup(self, chains: list[bytes]) -> Prefix | None:
        now = self.clock()
        with self._lock:
            self._expire(now)
            for i in range(len(chains) - 1, 0, -1):
                entry = self._prefixes.get(chains[i])
                if entry is not None and entry.messages is not None:
                    self._prefixes.move_to_end(chains[i])
                    entry.last_used = now
                    return entry
        return None

    def _store(self, chain: bytes, prefix: Prefix) -> None:
        cfg = self.config
        prefix.last_used = self.clock()
        with self._lock:
            self._drop(chain)
            self._prefixes[chain] = prefix
            if prefix.probe is not None:
                self._probes.setdefault(prefix.probe, []).append(chain)
            mine = [k for k, p in self._prefixes.items() if p.conversation == prefix.conversation]
            for k in mine[: -cfg.per_conversation]:
                self._drop(k)
            while len(self._prefixes) > cfg.max_prefixes:
                self._drop(next(iter(self._prefixes)))

    def _drop(self, chain: bytes) -> None:
        """Forget a prefix and its probe (the lock held)."""
        gone = self._prefixes.pop(chain, None)
        if gone is not None and gone.probe is not None:
            chains = self._probes.get(gone.probe, [])
            if chain in chains:
                chains.remove(chain)
            if not chains:
                self._probes.pop(gone.probe, None)

    def _expire(self, now: float) -> None:
        while self._prefixes:
            key, oldest = next(iter(self._prefixes.items()))
            if now - oldest.last_used < self.config.state_ttl_s:
                return
            self._drop(key)

    def prefixes(self) -> int:
        """How many prefixes are memoized (for tests and the bounded-memory check)."""
        with self._lock:
            return len(self._prefixes)

    # -- token counts --------------------------------------------------------------------------

    def _count(self, api: str, message: dict[str, Any], digest: bytes) -> int:
        n = self._tokens.get(digest)
        if n is None:
            n = message_tokens(api, message, self.compressor.counter)
            self._remember_count(digest, n)
        return n

    def _remember_count(self, digest: bytes, n: int) -> None:
        with self._lock:
            self._tokens[digest] = n
            while len(self._tokens) > self.config.token_memo:
                self._tokens.popitem(last=False)

    def _fixed(self, api: str, body: dict[str, Any]) -> int:
        """Tokens of what is sent beside the messages: the system prompt and tool definitions."""
        parts = [body.get("tools")]
        if api == "anthropic":
            parts.append(body.get("system"))
        text = dumps(parts)
        digest = hash_text(text)
        n = self._tokens.get(digest)
        if n is None:
            n = self.compressor.counter.count(text) if parts != [None, None] else 0
            self._remember_count(digest, n)
        return n


# -- helpers -------------------------------------------------------------------------------------


def _chains(api: str, digests: Sequence[bytes], h: bytes | None = None) -> list[bytes]:
    """chains[i]: the digest of the first i messages (from `h`, the chain before them)."""
    h = h or hashlib.blake2b(api.encode(), digest_size=16).digest()
    out = [h]
    for d in digests:
        h = hashlib.blake2b(h + d, digest_size=16).digest()
        out.append(h)
    return out


def leading_system(api: str, msgs: list[dict[str, Any]]) -> int:
    """OpenAI's leading system / developer messages: kept as they are, like Anthropic's system."""
    if api != "openai":
        return 0
    n = 0
    while n < len(msgs) and msgs[n].get("role") in ("system", "developer"):
        n += 1
    return n


def _conversation_id(api: str, body: dict[str, Any], chains: list[bytes], start: int) -> str:
    """The same for every request of a conversation: its system prompt and first message."""
    first = chains[min(start + 1, len(chains) - 1)]
    system = dumps(body.get("system")) if api == "anthropic" else ""
    h = hashlib.blake2b(first + MARKER.sub("", system).encode(), digest_size=6)
    return h.hexdigest()


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


def _is_stub(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and _content(message) == [
        {"type": "text", "text": CONTINUED}
    ]


def _join(
    api: str, head: list[dict[str, Any]], rest: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`head + rest` with the roles still alternating where they meet."""
    rest = list(rest)
    if not head or not rest:
        return head + rest
    last, first = head[-1].get("role"), rest[0].get("role")
    if last == "user" and _is_stub(rest[0]):
        rest = rest[1:]
        first = rest[0].get("role") if rest else None
    if api == "anthropic" and last == first == "user":
        merged = {**head[-1], "content": _content(head[-1]) + _content(rest[0])}
        return [*head[:-1], merged, *rest[1:]]
    if last == first == "assistant":
        return [*head, _stub(api), *rest]
    return head + rest


def _stub(api: str) -> dict[str, Any]:
    """The user turn that keeps the roles alternating where the history has none."""
    if api == "anthropic":
        return {"role": "user", "content": [{"type": "text", "text": CONTINUED}]}
    return {"role": "user", "content": CONTINUED}


def _strip_markers(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy without cache_control markers (the prefix gets its own at send time)."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and "cache_control" in b for b in content
        ):
            content = [
                {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                for b in content
            ]
            m = {**m, "content": content}
        out.append(m)
    return out


def _ttls(obj: Any) -> list[str]:
    """The TTLs of the cache_control markers in `obj` (or in JSON text), in order ("5m" when
    none is named)."""
    text = obj if isinstance(obj, str) else dumps(obj)
    if '"cache_control"' not in text:
        return []
    return [
        "1h" if re.search(r'"ttl"\s*:\s*"1h"', m.group(0)) else "5m" for m in MARKER.finditer(text)
    ]  # linear: one pass


def _marker_for(body: dict[str, Any], tail: Sequence[Any], tokens_to_end: int) -> Any:
    """The cache breakpoint that closes the compressed prefix, where the rendering rules allow
    one (None where not): within the four the API accepts beside the client's own, when the
    prompt up to it reaches the model's minimum cacheable length, with a TTL that keeps
    longer-lived breakpoints first. `tail`: what follows the prefix (messages or their JSON)."""
    before = _ttls([body.get("tools"), body.get("system")])
    after = [t for m in tail for t in _ttls(m)]
    if len(before) + len(after) >= MAX_BREAKPOINTS:
        return None
    if tokens_to_end < min_cacheable_tokens(str(body.get("model") or "")):
        return None
    long = "1h" in after or (before and all(t == "1h" for t in before))
    if long and "5m" in before:
        return None  # the client's own order already forbids it
    return {"type": "ephemeral", "ttl": "1h"} if long else {"type": "ephemeral"}


def _with_marker(head: list[dict[str, Any]], marker: dict[str, Any]) -> list[dict[str, Any]]:
    if not head:
        return head
    last = head[-1]
    content = _content(last)
    if not content or not isinstance(content[-1], dict):
        return head
    content[-1] = {**content[-1], "cache_control": marker}
    return [*head[:-1], {**last, "content": content}]
