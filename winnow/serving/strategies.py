"""Per-category rewrites of one unit: the text side of the strategies in TAXONOMY.md.

Pure functions of a unit's text, so compression stays deterministic:
- `preserve_structure`: code keeps signatures, changed lines and paths; bodies and comments shrink.
- `is_phase_boundary` / `phase_note`: what survives of a `drop_or_minimal` unit.
- `call_placeholder` / `RESULT_PLACEHOLDER`: the short stand-ins that keep a tool pair whole.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from winnow.data import cues
from winnow.data.schema import Unit

STRATEGIES = ("verbatim", "preserve_structure", "summarize", "drop_or_minimal", "drop")
RESULT_PLACEHOLDER = "[output omitted]"

HEAD_LINES = 6  # lines kept at the head of an edit's old/new string
MAX_LINE_CHARS = 200  # longer kept lines are cut (minified code, data blobs)
MIN_ELIDED = 3  # shorter runs of body lines are kept as they are: a marker would cost as much

# A line that carries structure: definitions, imports, declarations, decorators, headings.
_SIGNATURE = re.compile(
    r"^\s*(?:(?:export\s+|pub(?:\([\w:]+\))?\s+|public\s+|private\s+|protected\s+|internal\s+|"
    r"static\s+|async\s+|abstract\s+|final\s+|override\s+|default\s+)*"
    r"(?:def|class|fn|func|function|interface|struct|enum|trait|impl|type|module|namespace|"
    r"package|import|from\s+\S+\s+import|use|using|#include|#define|const|let|var|val|object|"
    r"record|macro_rules!|@\w+|#{1,6}\s))",
)
_COMMENT = re.compile(r"^\s*(?:#(?!include|define|!|\[)|//|/\*|\*(?!\*)|\*/|--\s|<!--|;;)")
_LINENO = re.compile(r"^(\s*\d+(?:→|\t| \| |: ))")  # Claude Code / cat -n / editor views
_DIFF_KEEP = re.compile(
    r"^(?:diff --git |index |--- |\+\+\+ |@@|\*\*\* |[+-]|Binary files |new file|deleted file|rename )"
)
_FENCE = re.compile(r"^\s*```")
# Keys of a tool call's input that hold a path, a command or a name: never shortened.
_KEEP_KEYS = re.compile(
    r"path|file|dir|cwd|command|cmd|pattern|glob|query|url|name|id|line|range|mode|kind|lang", re.I
)
_OLD_KEYS = frozenset({"old_string", "old_str", "old", "search", "original"})
_NEW_KEYS = frozenset({"new_string", "new_str", "new", "replace", "replacement"})

_PHASE = re.compile(
    r"^\W*(?:#{1,3}\s*)?(?:phase|step|stage|part|milestone|round)\s+\d+\b|"
    r"^\W*(?:moving on to|starting (?:on|with) (?:the )?(?:next|phase|part|step)|next phase|"
    r"switching to|on to (?:the )?next)\b|^\W*conversation compacted",
    re.I,
)


# --- preserve_structure -------------------------------------------------------------------


def preserve_structure(unit: Unit) -> str:
    """The unit's text with its code structure kept and its bodies shrunk (never longer)."""
    text = unit.text
    if unit.kind == "tool_call":
        out = _shrink_call(text)
    elif _FENCE.search(text) and not _LINENO.match(text):
        out = _shrink_fenced(text)
    else:
        out = shrink_code(text)
    return out if len(out) < len(text) else text


def shrink_code(text: str) -> str:
    """A diff keeps headers and changed lines; other code keeps its outline."""
    lines = text.split("\n")
    diff_lines = sum(1 for ln in lines if ln[:1] in "+-@" and ln.strip())
    if diff_lines >= max(2, len(lines) // 4) and any(_DIFF_KEEP.match(ln) for ln in lines[:50]):
        return _elide(lines, lambda ln: bool(_DIFF_KEEP.match(ln)))
    return _elide(lines, _is_outline_line)


def _is_outline_line(line: str) -> bool:
    m = _LINENO.match(line)
    body = line[m.end() :] if m else line
    if not body.strip() or _COMMENT.match(body):
        return False
    if _SIGNATURE.match(body):
        return True
    # Top-level statements (constants, config keys, markdown text) are structure too;
    # closing brackets alone are not.
    return not body[:1].isspace() and body.strip() not in ("}", "};", ")", "]", "end", "});")


def _elide(lines: list[str], keep: Any) -> str:
    """Keep lines where `keep(line)`; replace runs of other lines with one marker line."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) < MIN_ELIDED:
            out.extend(_cut(ln) for ln in run if not _blank_or_comment(ln))
        else:
            first = next((ln for ln in run if ln.strip()), run[0])
            m = _LINENO.match(first)
            body = first[m.end() :] if m else first
            indent = body[: len(body) - len(body.lstrip())]
            out.append(f"{indent}... ({len(run)} lines)")
        run.clear()

    for i, line in enumerate(lines):
        if keep(line) or i == 0:
            if run:
                flush()
            out.append(_cut(line))
        else:
            run.append(line)
    if run:
        flush()
    return "\n".join(out)


def _blank_or_comment(line: str) -> bool:
    m = _LINENO.match(line)
    body = line[m.end() :] if m else line
    return not body.strip() or bool(_COMMENT.match(body))


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " ..."


def _shrink_fenced(text: str) -> str:
    """Prose stays; the code inside ``` fences is shrunk."""
    parts = re.split(r"(^\s*```[^\n]*$)", text, flags=re.M)
    inside = False
    out: list[str] = []
    for part in parts:
        if _FENCE.match(part):
            inside = not inside
            out.append(part)
        else:
            out.append(shrink_code(part) if inside else part)
    return "".join(out)


def _shrink_call(text: str) -> str:
    """A tool call's JSON input with its path kept, edit strings cut to heads and changed lines."""
    try:
        args = json.loads(text)
        return _compact_json(_shrink_value(args, None, args))
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return shrink_code(text)


def _shrink_value(value: Any, key: str | None, parent: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shrink_value(v, k, value) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink_value(v, key, value) for v in value]
    if not isinstance(value, str):
        return value
    k = (key or "").lower()
    if "\n" not in value:  # paths, commands, names stay whole; other long strings are cut
        return value if _KEEP_KEYS.search(k) else _cut(value)
    if k in _OLD_KEYS:
        return _head(value)
    if k in _NEW_KEYS:
        old = next((parent[o] for o in _OLD_KEYS if isinstance(parent, dict) and o in parent), "")
        return _changed(value, old if isinstance(old, str) else "")
    return shrink_code(value)  # file contents, patches, heredocs


def _head(text: str, n: int = HEAD_LINES) -> str:
    lines = text.split("\n")
    if len(lines) <= n + MIN_ELIDED:
        return text
    return "\n".join([*map(_cut, lines[:n]), f"... (+{len(lines) - n} lines)"])


def _changed(new: str, old: str) -> str:
    """The head of `new` and every line it adds over `old`; the unchanged rest elided."""
    lines = new.split("\n")
    if len(lines) <= HEAD_LINES + MIN_ELIDED:
        return new
    keep = set(range(HEAD_LINES))
    matcher = difflib.SequenceMatcher(None, old.split("\n"), lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            keep.update(range(j1, j2))
    return _elide(lines, _IndexKeep(lines, keep))


class _IndexKeep:
    """`keep` predicate over line positions (lines may repeat, so test by position)."""

    def __init__(self, lines: list[str], keep: set[int]):
        self._iter = iter(range(len(lines)))
        self._keep = keep

    def __call__(self, _line: str) -> bool:
        return next(self._iter) in self._keep


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- drop_or_minimal and pair stand-ins -----------------------------------------------------


def is_phase_boundary(unit: Unit) -> bool:
    """A compaction boundary or summary, or a note that opens a new phase of the work."""
    x = unit.extra  # the readers flag compactions (claude_code, codex)
    if x.get("compact_boundary") or x.get("compact_summary"):
        return True
    if unit.kind not in ("text", "thinking"):  # "Step 1/5" in a build log opens no phase
        return False
    head = unit.text[:500]
    return cues.is_compact_summary(head) or _PHASE.search(head) is not None


def phase_note(unit: Unit) -> str:
    """The one-line note a phase boundary becomes."""
    if unit.extra.get("compact_boundary") and not unit.extra.get("compact_summary"):
        return "[context compacted]"
    line = next((ln.strip() for ln in unit.text.splitlines() if ln.strip()), "")
    return f"[phase] {line[:120]}"


def call_placeholder(unit: Unit) -> str:
    """A tool call reduced to what identifies it (paths, commands, names), as compact JSON."""
    try:
        args = json.loads(unit.text)
    except ValueError:
        line = unit.text.strip().split("\n", 1)[0]
        return line[:120]
    if not isinstance(args, dict):
        return "{}"
    kept = {
        k: (v[:120] if isinstance(v, str) else v)
        for k, v in args.items()
        if _KEEP_KEYS.search(k) and isinstance(v, (str, int, float, bool))
    }
    return _compact_json(kept)


__all__ = [
    "RESULT_PLACEHOLDER",
    "STRATEGIES",
    "call_placeholder",
    "is_phase_boundary",
    "phase_note",
    "preserve_structure",
    "shrink_code",
]
