"""Hand features of a unit: a small float vector the classifier sees beside the tokens.

Numpy and the standard library only, so that training and the torch-free serving path call
the very same code. Cost matters (it runs once per unit at serve time): the clipped text
(`clip_text`) is lower-cased and split into words once, the words are intersected with the
cue vocabulary once, and every other cue is a substring test or one of the anchored
`winnow.data.cues` matchers, which stop after a few characters. The open-ended cue regexes
of `winnow.data.cues` cost 0.1-0.4 ms each on a 1 kB unit, so they are not used here. A
unit's features are gathered as a list of the indices that are 1.0 and six real values,
then written into the numpy row.
"""

from __future__ import annotations

import math
import re
import string
from bisect import bisect_left
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from winnow.data import cues
from winnow.data.schema import KINDS, ROLES, Unit

# The spec a new model is trained on, and the specs this module computes (a model records its
# own: serving computes that one, so a model is served exactly as it was trained). v4: the
# `exit_nonzero` cue fires on a stated non-zero exit code only (v3's substrings fired on
# Codex's "Process exited with code 0" and missed "exit code 127", "exit status 2").
FEATURE_VERSION = 4
FEATURE_VERSIONS = (3, 4)

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
_EXIT_V3 = ("exit code 1", "exit code 2", "exit status 1", "exit code: 1", "exited with")
_MARKS = {
    "diff": ("\n@@ ", "\n+++ ", "old_string", "new_string", "begin patch", "<<<<<<< search"),
    "fence": ("```",),
    "url": ("://",),
    "exit_nonzero": _EXIT_V3,  # from v4: `_exit_nonzero`
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
_CODE_CHARS = b"{;=("  # counted in the UTF-8 bytes: ASCII, so one byte per character
# Words are split at whitespace and at punctuation other than ' and _ ("don't" and
# "snake_case" stay whole). The split runs on UTF-8 bytes, where it is one byte translate
# (ASCII bytes never occur inside a multi-byte character); bytes.split() does not cut at
# \x1c-\x1f or at non-ASCII whitespace as str.split() does, so those become spaces first.
_CUTS = ("".join(c for c in string.punctuation if c not in "'_") + "\x1c\x1d\x1e\x1f").encode()
_BYTE_SPLIT = bytes.maketrans(_CUTS, b" " * len(_CUTS))
_WIDE_SPACE = re.compile(r"[^\S\x00-\x7f]")

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

# Index tables, so that setting a feature is a list append.
_ROLE_AT = {r: _AT[f"role={r}"] for r in ROLES}
_KIND_AT = {k: _AT[f"kind={k}"] for k in KINDS}
_TOOL_AT = {b: _AT[f"tool={b}"] for b in TOOL_BUCKETS}
# A neighbour's kinds, role=user and question features (the next unit's question is unused).
_PREV_AT = ({k: _AT[f"prev_kind={k}"] for k in KINDS}, _AT["prev_role=user"], _AT["prev_question"])
_NEXT_AT = ({k: _AT[f"next_kind={k}"] for k in KINDS}, _AT["next_role=user"], None)
_REAL = ("log_chars", "log_lines", "rel_position", "log_index", "code_char_ratio", "indent_ratio")
_REAL_AT = [_AT[n] for n in _REAL]


def _word_table() -> dict[bytes, tuple[list[int], list[tuple[frozenset[bytes], int]]]]:
    """Each cue word (UTF-8) -> the word cues it sets and the phrases to check when it is
    found. A phrase is checked under its longest word: without that word it cannot hold."""
    table: dict[bytes, tuple[list[int], list[tuple[frozenset[bytes], int]]]] = {}
    for name, words in (*_WORD_SETS.items(), ("path_ext", _EXT)):
        for w in words:
            table.setdefault(w.encode(), ([], []))[0].append(_CUE_AT[name])
    for name, phrases in _PHRASE_SETS.items():
        for p in phrases:
            need = frozenset(w.encode() for w in p)
            for b in need:
                table.setdefault(b, ([], []))
            table[max(p, key=len).encode()][1].append((need, _CUE_AT[name]))
    return table


_CUE_WORDS = _word_table()
# Substring cues of the lower-cased clipped text, in groups behind a cheaper test that
# each member implies: its first word or one of its rarer characters (a memchr). Most texts
# fail most tests.
_SUBSTRINGS = {
    **_MARKS,
    "slash": ("/", "\\"),
    "question": ("?\n",),
    "compact_request": ("summary of the conversation", "summarize the conversation"),
}
_RARE = "@+`<>=?_\\/:-"  # rarest first
# An exit code a text states: "exit code 127", "Exit code: 2", "exit status 2", "returned
# non-zero exit status 1", "Process exited with code 0", "exit_code": 1, "returncode=0".
# Anchored after each "exit" / "returncode" that str.find gives (a regex scanning the whole
# text cost 13 us on 600 characters, this 2 us) and bounded but for the digits: linear.
_EXIT_TAIL = {
    "exit": re.compile(r"(?:ed with)?[ _](?:code|status)\W{0,3}(-?\d+)"),
    "returncode": re.compile(r"\W{0,3}(-?\d+)"),
}


def _gate(sub: str) -> str:
    """A test that `sub in text` implies: `sub`'s first word if it has several, else its
    rarest character, else "" (no test)."""
    words = sub.split()
    if len(words) > 1:
        return words[0]
    return next((c for c in _RARE if c in sub), "") if len(sub) > 1 else ""


def _substring_groups(version: int) -> list[tuple[str, list[tuple[str, int]]]]:
    groups: dict[str, list[tuple[str, int]]] = {}
    for name, subs in _SUBSTRINGS.items():
        if name == "exit_nonzero" and version >= 4:
            continue
        for sub in subs:
            groups.setdefault(_gate(sub), []).append((sub, _CUE_AT[name]))
    return list(groups.items())


_SUBSTRING_GROUPS = {v: _substring_groups(v) for v in FEATURE_VERSIONS}
_EXIT_NONZERO_AT = _CUE_AT["exit_nonzero"]
_ANCHORED_AT = [(fn, _CUE_AT[name]) for name, fn in _ANCHORED.items()]


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


def _neighbour(hot: list[int], u: Unit | dict[str, Any], side: tuple) -> None:
    kinds, user, question = side
    role, kind, text = (
        (u.get("role"), u.get("kind"), u.get("text") or "")
        if isinstance(u, dict)
        else (u.role, u.kind, u.text or "")
    )
    if kind in KINDS:
        hot.append(kinds[kind])
    if role == "user":
        hot.append(user)
    if question is not None and text[-300:].rstrip().endswith("?"):
        hot.append(question)


def _fields(u: Unit | dict[str, Any]) -> tuple:
    if isinstance(u, dict):
        return (u.get("role"), u.get("kind"), u.get("text") or "", u.get("tool_name"),
                u.get("is_error"), u.get("index"))  # fmt: skip
    return u.role, u.kind, u.text or "", u.tool_name, u.is_error, u.index


def _row(
    unit: Unit | dict[str, Any], context: Context | None, hot: list[int], version: int
) -> tuple:
    """Append the indices of the unit's 1.0 features to `hot`; return its `_REAL` values."""
    role, kind, text, tool, is_error, index = _fields(unit)
    index = int(index or 0)
    n = max(int(context.session_len or 0) if context else 0, index + 1)
    if context:
        if context.prev is not None:
            _neighbour(hot, context.prev, _PREV_AT)
        if context.next is not None:
            _neighbour(hot, context.next, _NEXT_AT)
    if role in ROLES:
        hot.append(_ROLE_AT[role])
    if kind in KINDS:
        hot.append(_KIND_AT[kind])
    hot.append(_TOOL_AT[tool_bucket(tool)])
    if is_error:
        hot.append(_AT["is_error"])
    chars = len(text)
    hot.append(_LEN0 + bisect_left(LENGTH_EDGES, chars))
    if index == 0:
        hot.append(_AT["first_in_session"])
    if index == n - 1:
        hot.append(_AT["last_in_session"])
    return (
        math.log1p(chars) / 12.0,
        math.log1p(text.count("\n")) / 8.0,
        index / (n - 1) if n > 1 else 0.0,
        math.log1p(index) / 8.0,
        *_text_cues(clip_text(text), role, hot, version),
    )


def _text_cues(clipped: str, role: Any, hot: list[int], version: int) -> tuple[float, float]:
    """Append the cues of a clipped text to `hot`; return its code-char and indent ratios."""
    stripped = clipped.strip()
    if not stripped:
        hot.append(_AT["empty"])
        return 0.0, 0.0
    low = clipped.lower()
    raw = low.encode("utf-8", "surrogatepass")
    code_chars = len(raw) - len(raw.translate(None, _CODE_CHARS))
    code_ratio = min(1.0, 10.0 * code_chars / len(low))
    indent_ratio = min(1.0, low.count("\n  ") / (low.count("\n") + 1))
    if not low.isascii():
        raw = _WIDE_SPACE.sub(" ", low).encode("utf-8", "surrogatepass")
    found = _CUE_WORDS.keys() & raw.translate(_BYTE_SPLIT).split()
    for w in found:
        word_cues, phrases = _CUE_WORDS[w]
        hot += word_cues
        for need, i in phrases:
            if need <= found:
                hot.append(i)
    for gate, subs in _SUBSTRING_GROUPS[version]:
        if gate in low:
            hot += [i for sub, i in subs if sub in low]
    if version >= 4 and _exit_nonzero(low):
        hot.append(_EXIT_NONZERO_AT)
    hot += [i for fn, i in _ANCHORED_AT if fn(stripped)]
    if stripped.endswith("?"):
        hot.append(_CUE_AT["question"])
    if "<command-" in low or "<local-command" in low:
        hot.append(_CUE_AT["wrapper"])
        cmd = cues.slash_command(clipped)
        if cmd and cues.is_housekeeping_command(cmd[0]):
            hot.append(_CUE_AT["housekeeping"])
    if role == "user" and ("being continued from a previous" in low[:300] or "<summary>" in low):
        hot.append(_CUE_AT["compact_summary"])
    return code_ratio, indent_ratio


def _exit_nonzero(low: str) -> bool:
    """Whether a (lower-cased) text states a non-zero exit code."""
    for word, tail in _EXIT_TAIL.items():
        i = low.find(word)
        while i >= 0:
            i += len(word)
            m = tail.match(low, i)
            if m is not None and m.group(1).strip("-0"):  # "0", "-0", "00": success
                return True
            i = low.find(word, i)
    return False


def check_version(version: int) -> int:
    """`version` if this module computes that feature spec; ValueError otherwise."""
    if version not in FEATURE_VERSIONS:
        raise ValueError(
            f"feature spec v{version}: this winnow computes v{', v'.join(map(str, FEATURE_VERSIONS))}"
        )
    return version


def unit_features(
    unit: Unit | dict[str, Any],
    context: Context | None = None,
    out: np.ndarray | None = None,
    version: int = FEATURE_VERSION,
) -> np.ndarray:
    """The feature vector (FEATURE_NAMES order) of one unit, computed as feature spec
    `version` (one of FEATURE_VERSIONS: a model's own) computes it.

    Without a `context` the unit is taken as the latest of its session, as in live use:
    session length index + 1, no next unit. `out`, if given, must arrive zeroed.
    """
    v = np.zeros(N_FEATURES, np.float32) if out is None else out
    hot: list[int] = []
    real = _row(unit, context, hot, check_version(version))
    for i in hot:
        v[i] = 1.0
    for i, x in zip(_REAL_AT, real):
        v[i] = x
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
    units: Sequence[Unit | dict[str, Any]],
    contexts: Sequence[Context] | None = None,
    version: int = FEATURE_VERSION,
) -> np.ndarray:
    """The [len(units), N_FEATURES] float32 matrix (feature spec `version`); contexts are taken
    from `units` unless given."""
    check_version(version)
    contexts = session_context(units) if contexts is None else contexts
    out = np.zeros((len(units), N_FEATURES), np.float32)
    hot: list[int] = []
    per_row: list[int] = []
    real = []
    for u, c in zip(units, contexts):
        start = len(hot)
        real.append(_row(u, c, hot, version))
        per_row.append(len(hot) - start)
    if real:
        out[np.repeat(np.arange(len(real)), per_row), hot] = 1.0
        out[: len(real), _REAL_AT] = real
    return out


__all__ = [
    "CLIP_HEAD",
    "CLIP_TAIL",
    "CUES",
    "Context",
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "FEATURE_VERSIONS",
    "N_FEATURES",
    "TOOL_BUCKETS",
    "batch_features",
    "check_version",
    "clip_text",
    "session_context",
    "tool_bucket",
    "unit_features",
]
