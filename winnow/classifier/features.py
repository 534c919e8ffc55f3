"""Hand features of a unit: a small float vector the classifier sees beside the tokens.

Numpy and the standard library only, so that training and the torch-free serving path call
the very same code. Cost matters (it runs once per unit at serve time): the clipped text
(`clip_text`) is lower-cased and split into a word set once, and every cue is a set
intersection, a substring test or one of the anchored `winnow.data.cues` matchers, which
stop after a few characters. The open-ended cue regexes of `winnow.data.cues` cost
0.1-0.4 ms each on a 1 kB unit, so they are not used here.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from winnow.data import cues
from winnow.data.schema import KINDS, ROLES, Unit

FEATURE_VERSION = 3

# Long units keep their head and tail: errors and conclusions sit at the ends.
CLIP_HEAD = 400
CLIP_TAIL = 200

TOOL_BUCKETS = (
    "none", "read", "search", "list", "edit", "write", "shell", "plan", "web", "task", "ask", "other",
)  # fmt: skip
_CLASS_TO_BUCKET = {"finish": "other"}
_LIST_TOOLS = frozenset({"ls", "list_directory", "list_files", "list_dir", "glob", "tree"})
_WRITE_TOOLS = frozenset({"write", "write_file", "create", "create_file"})
# For names `cues.tool_class` does not know: rules over the name's words (TodoWrite ->
# todo, write; search_issues -> search, issues), first hit wins.
_TOOL_RULES = (
    ("plan", {"todo", "todos", "plan"}),
    ("edit", {"edit", "replace", "patch", "str"}),
    ("write", {"write", "create", "save"}),
    ("shell", {"bash", "shell", "exec", "command", "terminal", "run", "cmd"}),
    ("search", {"grep", "search", "find", "glob", "query"}),
    ("list", {"list", "ls", "dir", "tree"}),
    ("read", {"read", "view", "open", "cat", "get", "show"}),
    ("web", {"web", "fetch", "browse", "url", "http"}),
)
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Upper bounds (chars, inclusive) of the length buckets; the last bucket is open-ended.
LENGTH_EDGES = (0, 20, 80, 300, 1000, 3000, 10000)

_WORDS = {
    "code_word": "def class import return func function const let var fn pub package struct "
    "interface async await self this null none true false elif endif println printf",
    "error_word": "error errors traceback exception failed failure fatal panic errno denied "
    "rejected typeerror valueerror keyerror attributeerror importerror syntaxerror nameerror "
    "runtimeerror assertionerror modulenotfounderror indexerror filenotfounderror oserror "
    "undefined unresolved segfault crash crashed",
    "requirement_word": "please implement add create build fix change update remove delete rename "
    "refactor support migrate want need needs should can could would investigate review",
    "constraint_word": "must never don't dont avoid only without keep required forbidden ensure "
    "always mustn't shouldn't can't cannot",
    "decision_word": "because decided decision instead rather culprit conclusion therefore "
    "so plan approach chose choose going",
    "architecture_word": "module modules component components architecture interface layer "
    "pipeline handler handlers registry dispatch dispatches responsible entrypoint calls "
    "structure service services",
    "weighing_word": "alternatively maybe might perhaps whether tradeoff option options either",
    "ack_word": "ok okay thanks thank sure yes yep yeah continue proceed great perfect lgtm cool",
    "status_word": "let i'll now next checking looking running reading searching done",
}
# Multi-word phrases are matched as "all their words occur" (a set test, ~0.1 us) rather
# than as substrings (~0.7 us each on 1 kB).
_PHRASES = {
    "decision_phrase": (
        "root cause", "issue is", "problem is", "bug is", "fix is", "turns out", "go with",
        "instead of", "rather than", "ruled out", "caused by", "that's why", "this means",
        "the plan", "not the cause",
    ),
    "constraint_phrase": (
        "do not", "make sure", "backward compatible", "backwards compatible", "at most",
        "at least", "no more than", "not allowed", "stick to",
    ),
    "requirement_phrase": ("can you", "could you", "i want", "i need", "we need", "let's", "how do"),
    "test_pass": ("tests passed", "passed in", "all tests pass", "0 failed", "0 errors"),
}  # fmt: skip
# Symbols and markup, matched as substrings of the lower-cased clipped text.
_MARKS = {
    "diff": ("\n@@ ", "\n+++ ", "old_string", "new_string", "begin patch", "<<<<<<< search"),
    "fence": ("```",),
    "url": ("://",),
    "exit_nonzero": ("exit code 1", "exit code 2", "exit status 1", "exit code: 1", "exited with"),
    "arrow": ("->", "→", "=>"),
    "checkmark": ("✓", "✔", "✅"),
}  # fmt: skip
_ANCHORED = {
    "ack": cues.is_acknowledgment,
    "announcement": cues.is_announcement,
    "bare_done": cues.is_bare_done,
    "greeting": cues.is_greeting,
    "boilerplate_marker": cues.is_boilerplate_marker,
    "placeholder": cues.is_placeholder,
    "bash_input": cues.is_bash_input,
    "task_notification": cues.is_task_notification,
    "skill_expansion": cues.is_skill_expansion,
}
_WORD_SETS = {k: frozenset(v.split()) for k, v in _WORDS.items()}
_PHRASE_SETS = {k: tuple(frozenset(p.split()) for p in v) for k, v in _PHRASES.items()}
_SPLIT = str.maketrans({c: " " for c in string.punctuation if c not in "'_"})
_CODE_CHARS = "{;=("

CUES = (
    *_WORD_SETS,
    *_PHRASES,
    *_MARKS,
    *_ANCHORED,
    "path_ext",
    "slash",
    "question",
    "wrapper",
    "housekeeping",
    "compact_summary",
    "compact_request",
)
_SCALARS = (
    "log_chars", "log_lines", "rel_position", "log_index", "first_in_session",
    "last_in_session", "empty", "code_char_ratio", "indent_ratio",
)  # fmt: skip
FEATURE_NAMES: tuple[str, ...] = (
    *(f"role={r}" for r in ROLES),
    *(f"kind={k}" for k in KINDS),
    *(f"tool={b}" for b in TOOL_BUCKETS),
    "is_error",
    *(f"len<={e}" for e in LENGTH_EDGES),
    f"len>{LENGTH_EDGES[-1]}",
    *_SCALARS,
    *(f"cue={c}" for c in CUES),
    # Neighbours: "Let me run the tests" is followed by a tool call, a closing summary by the
    # user or by nothing; a short user reply follows a question.
    *(f"prev_kind={k}" for k in KINDS),
    "prev_role=user",
    "prev_question",
    *(f"next_kind={k}" for k in KINDS),
    "next_role=user",
)
N_FEATURES = len(FEATURE_NAMES)
_AT = {name: i for i, name in enumerate(FEATURE_NAMES)}
_LEN0 = _AT["len<=0"]
_CUE_AT = {c: _AT[f"cue={c}"] for c in CUES}
# File extensions that are rarely English words (a path "a/b.py" splits into "a", "b", "py").
_EXT = frozenset(
    "py ts tsx js jsx rs java kt rb cpp cs md json yaml yml toml ps1 sql html css txt cfg ini "
    "jsonl ipynb".split()
)


def clip_text(text: str, head: int = CLIP_HEAD, tail: int = CLIP_TAIL) -> str:
    """The first `head` and last `tail` characters of a long text, joined by a newline."""
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + text[-tail:]


_bucket_cache: dict[str | None, str] = {}


def tool_bucket(tool_name: str | None) -> str:
    """Map a tool name of any agent (Read, read_file, str_replace_editor, ...) to `TOOL_BUCKETS`."""
    b = _bucket_cache.get(tool_name)
    if b is not None:
        return b
    b = "none"
    if tool_name:
        raw = tool_name.rsplit("__", 1)[-1]  # mcp__server__tool -> tool
        name = raw.lower()
        cls = cues.tool_class(name)
        if name in _LIST_TOOLS:
            b = "list"
        elif name in _WRITE_TOOLS:
            b = "write"
        elif cls is not None:
            b = _CLASS_TO_BUCKET.get(cls, cls)
        else:
            words = {w.lower() for w in _NAME_WORDS.findall(raw)}
            b = next((bk for bk, keys in _TOOL_RULES if words & keys), "other")
    if len(_bucket_cache) < 4096:
        _bucket_cache[tool_name] = b
    return b


class Context(NamedTuple):
    """Where a unit sits: its session's length and its neighbours (None: unknown / none)."""

    session_len: int | None = None
    prev: Unit | dict[str, Any] | None = None
    next: Unit | dict[str, Any] | None = None


def _neighbour(v: np.ndarray, u: Unit | dict[str, Any], side: str) -> None:
    role, kind, text = (
        (u.get("role"), u.get("kind"), u.get("text") or "")
        if isinstance(u, dict)
        else (u.role, u.kind, u.text or "")
    )
    if kind in KINDS:
        v[_AT[f"{side}_kind={kind}"]] = 1.0
    if role == "user":
        v[_AT[f"{side}_role=user"]] = 1.0
    if side == "prev" and text[-300:].rstrip().endswith("?"):
        v[_AT["prev_question"]] = 1.0


def _fields(u: Unit | dict[str, Any]) -> tuple:
    if isinstance(u, dict):
        return (u.get("role"), u.get("kind"), u.get("text") or "", u.get("tool_name"),
                u.get("is_error"), u.get("index"))  # fmt: skip
    return u.role, u.kind, u.text or "", u.tool_name, u.is_error, u.index


def unit_features(
    unit: Unit | dict[str, Any], context: Context | None = None, out: np.ndarray | None = None
) -> np.ndarray:
    """The feature vector (FEATURE_NAMES order) of one unit.

    Without a `context` the unit is taken as the latest of its session, as in live use:
    session length index + 1, no next unit.
    """
    role, kind, text, tool, is_error, index = _fields(unit)
    index = int(index or 0)
    ctx = context or Context()
    n = max(int(ctx.session_len or 0), index + 1)
    # Only non-zero entries are written: `out` must arrive zeroed.
    v = np.zeros(N_FEATURES, np.float32) if out is None else out
    if ctx.prev is not None:
        _neighbour(v, ctx.prev, "prev")
    if ctx.next is not None:
        _neighbour(v, ctx.next, "next")
    if role in ROLES:
        v[_AT[f"role={role}"]] = 1.0
    if kind in KINDS:
        v[_AT[f"kind={kind}"]] = 1.0
    v[_AT[f"tool={tool_bucket(tool)}"]] = 1.0
    if is_error:
        v[_AT["is_error"]] = 1.0
    chars = len(text)
    v[_LEN0 + next((i for i, e in enumerate(LENGTH_EDGES) if chars <= e), len(LENGTH_EDGES))] = 1.0
    v[_AT["log_chars"]] = math.log1p(chars) / 12.0
    v[_AT["log_lines"]] = math.log1p(text.count("\n")) / 8.0
    v[_AT["rel_position"]] = index / (n - 1) if n > 1 else 0.0
    v[_AT["log_index"]] = math.log1p(index) / 8.0
    if index == 0:
        v[_AT["first_in_session"]] = 1.0
    if index == n - 1:
        v[_AT["last_in_session"]] = 1.0

    clipped = clip_text(text)
    stripped = clipped.strip()
    if not stripped:
        v[_AT["empty"]] = 1.0
        return v
    low = clipped.lower()
    v[_AT["code_char_ratio"]] = min(1.0, 10.0 * sum(map(low.count, _CODE_CHARS)) / len(low))
    v[_AT["indent_ratio"]] = min(1.0, low.count("\n  ") / (low.count("\n") + 1))
    words = set(low.translate(_SPLIT).split())
    for name, ws in _WORD_SETS.items():
        if not words.isdisjoint(ws):
            v[_CUE_AT[name]] = 1.0
    for name, phrases in _PHRASE_SETS.items():
        if any(p <= words for p in phrases):
            v[_CUE_AT[name]] = 1.0
    for name, marks in _MARKS.items():
        if any(m in low for m in marks):
            v[_CUE_AT[name]] = 1.0
    for name, fn in _ANCHORED.items():
        if fn(stripped):
            v[_CUE_AT[name]] = 1.0
    if not words.isdisjoint(_EXT):
        v[_CUE_AT["path_ext"]] = 1.0
    if "/" in low or "\\" in low:
        v[_CUE_AT["slash"]] = 1.0
    if stripped.endswith("?") or "?\n" in low:
        v[_CUE_AT["question"]] = 1.0
    if "<command-" in low or "<local-command" in low:
        v[_CUE_AT["wrapper"]] = 1.0
        cmd = cues.slash_command(clipped)
        if cmd and cues.is_housekeeping_command(cmd[0]):
            v[_CUE_AT["housekeeping"]] = 1.0
    if role == "user" and ("being continued from a previous" in low[:300] or "<summary>" in low):
        v[_CUE_AT["compact_summary"]] = 1.0
    if "summary of the conversation" in low or "summarize the conversation" in low:
        v[_CUE_AT["compact_request"]] = 1.0
    return v


def session_context(units: Sequence[Unit | dict[str, Any]]) -> list[Context]:
    """Each unit's Context as seen in `units`: session length (max index + 1) and the units
    before and after it in its session (by index)."""
    sessions: dict[Any, list[tuple[int, int]]] = {}
    for pos, u in enumerate(units):
        sid, idx = (
            (u.get("session_id"), u.get("index"))
            if isinstance(u, dict)
            else (u.session_id, u.index)
        )
        sessions.setdefault(sid, []).append((int(idx or 0), pos))
    out: list[Context] = [Context()] * len(units)
    for members in sessions.values():
        members.sort()
        n = members[-1][0] + 1
        for j, (_, pos) in enumerate(members):
            prev = units[members[j - 1][1]] if j > 0 else None
            nxt = units[members[j + 1][1]] if j + 1 < len(members) else None
            out[pos] = Context(n, prev, nxt)
    return out


def batch_features(
    units: Sequence[Unit | dict[str, Any]], contexts: Sequence[Context] | None = None
) -> np.ndarray:
    """The [len(units), N_FEATURES] float32 matrix; contexts are taken from `units` unless given."""
    contexts = session_context(units) if contexts is None else contexts
    out = np.zeros((len(units), N_FEATURES), np.float32)
    for i, (u, c) in enumerate(zip(units, contexts)):
        unit_features(u, c, out[i])
    return out


__all__ = [
    "CLIP_HEAD",
    "CLIP_TAIL",
    "CUES",
    "Context",
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "N_FEATURES",
    "TOOL_BUCKETS",
    "batch_features",
    "clip_text",
    "session_context",
    "tool_bucket",
    "unit_features",
]
