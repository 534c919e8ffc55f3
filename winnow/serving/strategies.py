"""Per-category rewrites of one unit: the text side of the strategies in TAXONOMY.md.

Pure functions of a unit's text, so compression stays deterministic, and each linear in its
input (no regex that can backtrack over more than one line, no pairwise diff):
- `preserve_structure`: code keeps signatures, changed lines and paths; bodies and comments shrink.
- `is_phase_boundary` / `phase_note`: what survives of a `drop_or_minimal` unit.
- `call_placeholder` / `result_note` / `RESULT_PLACEHOLDER`: the one-line notes of a tool pair:
  the call keeps what identifies it (path, command, pattern, url, description, skill, subagent
  type), the result its error lines or a placeholder.
- `long_values` / `summarize_call`: a tool call's input with its long values summarized.
- `error_lines` / `error_excerpt` / `first_line_excerpt`: the lines of a text that report an
  error (or, naming none, its first line), kept verbatim.
- `omitted_note` / `duplicate_note`: what a text left out for length, or a repeated copy of a
  unit, becomes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
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
# A fence opens a line (indented at most by spaces and tabs: `\s*` would run across blank
# lines, and backtrack over each run once per line start).
_FENCE = re.compile(r"^[ \t]*```", re.M)
# Words of a tool call's input keys (split at `_`, `-` and camelCase) whose values identify
# the call: a path, a command, a pattern, a name. Never shortened, and all a note keeps.
IDENTITY_WORDS = frozenset(
    "path paths file files filename dir directory cwd workdir command cmd pattern glob query "
    "queries url uri name id description skill args subagent subject task status session "
    "line lines offset limit range mode kind lang language repo pr number title branch ref "
    "target type".split()
)
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_OLD_KEYS = frozenset({"old_string", "old_str", "old", "search", "original"})
_NEW_KEYS = frozenset({"new_string", "new_str", "new", "replace", "replacement"})

_PHASE = re.compile(
    r"^\W*(?:#{1,3}\s*)?(?:phase|step|stage|part|milestone|round)\s+\d+\b|"
    r"^\W*(?:moving on to|starting (?:on|with) (?:the )?(?:next|phase|part|step)|next phase|"
    r"switching to|on to (?:the )?next)\b|^\W*conversation compacted",
    re.I,
)


# --- preserve_structure -------------------------------------------------------------------


def preserve_structure(unit: Unit, head: int = 0, ahead: int = 0) -> str:
    """The unit's text with its code structure kept and its bodies shrunk (never longer);
    `head` keeps the first lines of each body it elides, and the first `ahead` bodies keep
    `next_head(head)` (a tool call's input ignores both; fenced code in prose, `ahead`)."""
    text = unit.text
    if unit.kind == "tool_call":
        out = _shrink_call(text)
    elif is_fenced(text):
        out = _shrink_fenced(text, head, ahead)
    else:
        out = _elide(*outline(text), head, ahead)
    return out if len(out) < len(text) else text


def elided_runs(text: str) -> list[list[str]]:
    """The runs of body lines the outline of `text` elides (MIN_ELIDED lines or more), in
    order: of its fenced code blocks (prose with ``` fences), else of the whole text."""
    blocks = [c for code, c in _fenced_parts(text) if code] if is_fenced(text) else [text]
    return [r for block in blocks for r in _runs(*outline(block)) if len(r) >= MIN_ELIDED]


def _runs(lines: Sequence[str], keep: Sequence[bool]) -> list[list[str]]:
    """The runs of lines between those `keep` marks (and the first line), as `_elide` meets
    them."""
    runs: list[list[str]] = []
    for k, line in enumerate(lines):
        if keep[k] or k == 0:
            runs.append([])
        else:
            runs[-1].append(line)
    return runs


def next_head(head: int) -> int:
    """The step after `head` in the ladder of fuller outlines: 0, 2, 3, 4, 6, 9, 13, ..."""
    return 2 if head < 2 else head * 3 // 2


def is_fenced(text: str) -> bool:
    """Prose with ``` code fences (not a numbered file view)."""
    return not _LINENO.match(text) and _FENCE.search(text) is not None


@functools.lru_cache(maxsize=4096)  # a session's calls use a few dozen keys, again and again
def is_identity_key(key: str) -> bool:
    """Whether a tool input key names what the call acts on (`file_path`, `subagent_type`,
    `taskId`; not `model`, `old_string`, `content`)."""
    return any(w.lower() in IDENTITY_WORDS for w in _KEY_WORD.findall(key))


def shrink_code(text: str, head: int = 0) -> str:
    """A diff keeps headers and changed lines; other code keeps its outline (and the first
    `head` lines of each body it elides)."""
    return _elide(*outline(text), head)


@functools.lru_cache(maxsize=4)
def outline(text: str) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    """The lines of a code text and which of them are its structure (kept whole). Memoized
    for the last few texts: the compressor outlines a unit, then counts the lines of its
    fuller outlines, then writes the one it picks (three passes over the same text)."""
    lines = text.split("\n")
    diff_lines = sum(1 for ln in lines if ln[:1] in "+-@" and ln.strip())
    if diff_lines >= max(2, len(lines) // 4) and any(_DIFF_KEEP.match(ln) for ln in lines[:50]):
        return tuple(lines), tuple(bool(_DIFF_KEEP.match(ln)) for ln in lines)
    return tuple(lines), tuple(_is_outline_line(ln) for ln in lines)


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


def _elide(lines: Sequence[str], keep: Sequence[bool], head: int = 0, ahead: int = 0) -> str:
    """Keep the lines `keep` marks; replace runs of other lines with one marker line (after
    their first `head` lines, `next_head(head)` for the first `ahead` runs of at least
    MIN_ELIDED lines; a run that leaves fewer than MIN_ELIDED after them is kept)."""
    out: list[str] = []
    run: list[str] = []
    runs = 0  # the runs of at least MIN_ELIDED lines so far

    def flush() -> None:
        nonlocal runs
        n = head
        if len(run) >= MIN_ELIDED:
            n = next_head(head) if runs < ahead else head
            runs += 1
        if len(run) < MIN_ELIDED + n:
            out.extend(_cut(ln) for ln in run if not blank_or_comment(ln))
        else:
            out.extend(_cut(ln) for ln in run[:n] if not blank_or_comment(ln))
            del run[:n]
            first = next((ln for ln in run if ln.strip()), run[0])
            m = _LINENO.match(first)
            body = first[m.end() :] if m else first
            indent = body[: len(body) - len(body.lstrip())]
            out.append(f"{indent}... ({len(run)} lines)")
        run.clear()

    for i, line in enumerate(lines):
        if keep[i] or i == 0:
            if run:
                flush()
            out.append(_cut(line))
        else:
            run.append(line)
    if run:
        flush()
    return "\n".join(out)


def blank_or_comment(line: str) -> bool:
    """Whether a body line is blank or a comment (an elided run's head leaves it out)."""
    m = _LINENO.match(line)
    body = line[m.end() :] if m else line
    return not body.strip() or bool(_COMMENT.match(body))


def _cut(line: str, n: int = MAX_LINE_CHARS) -> str:
    return line if len(line) <= n else line[:n] + " ..."


def _shrink_fenced(text: str, head: int = 0, ahead: int = 0) -> str:
    """Prose stays; the code inside ``` fences is shrunk (an unclosed fence runs to the end);
    `ahead` counts the runs of all the blocks, in order."""
    out: list[str] = []
    for code, part in _fenced_parts(text):
        if not code:
            out.append(part)
            continue
        lines, keep = outline(part)
        out.append(_elide(lines, keep, head, max(0, ahead)))
        ahead -= sum(len(r) >= MIN_ELIDED for r in _runs(lines, keep))
    return "\n".join(out)


def _fenced_parts(text: str) -> list[tuple[bool, str]]:
    """The lines of prose with ``` fences, in order, as (is code, text): a line of prose or
    of a fence each, and each fenced block's code as one text (an unclosed fence's up to the
    end)."""
    out: list[tuple[bool, str]] = []
    code: list[str] = []
    inside = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            if inside:
                out.append((True, "\n".join(code)))
                code.clear()
            inside = not inside
            out.append((False, line))
        elif inside:
            code.append(line)
        else:
            out.append((False, line))
    if code:
        out.append((True, "\n".join(code)))
    return out


def _shrink_call(text: str) -> str:
    """A tool call's JSON input with its path kept, edit strings cut to heads and changed lines."""
    try:
        return _compact_json(_shrink_value(json.loads(text), None, None))
    except (ValueError, RecursionError):  # not JSON, or nested deeper than Python recurses
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
        return value if is_identity_key(k) else _cut(value)
    if k in _OLD_KEYS:
        return _head(value)
    if k in _NEW_KEYS:
        old = next((parent[o] for o in _OLD_KEYS if isinstance(parent, dict) and o in parent), "")
        return _changed(value, old if isinstance(old, str) else "")
    return shrink_code(value)  # file contents, patches, heredocs


LONG_VALUE_CHARS = 200  # a tool call's string values this long are what a call summary shortens
LONG_IDENTITY_CHARS = 600  # ...and its identifying values (command, path) only this long


def long_values(text: str) -> list[str]:
    """The keys of a tool call's JSON input whose string values a summary may shorten (long,
    and not what identifies the call); [] when the text is not a JSON object."""
    try:
        args = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(args, dict):
        return []
    return [
        k
        for k, v in args.items()
        if isinstance(v, str)
        # a command or path this long is a payload (an inline script, a data blob), not a name
        and len(v) > (LONG_IDENTITY_CHARS if is_identity_key(k) else LONG_VALUE_CHARS)
    ]


def summarize_call(
    text: str, max_tokens: int, summarize: Callable[[str, int], str], count: Callable[[str], int]
) -> str | None:
    """A tool call's JSON input within `max_tokens` (as compact JSON): the keys that identify
    it kept whole, each long string value summarized, the room shared by their lengths.
    None when it cannot be done (not JSON, nothing long, no room)."""
    keys = long_values(text)
    if not keys:
        return None
    args = json.loads(text)
    fixed = count(_compact_json({k: ("" if k in keys else v) for k, v in args.items()}))
    sizes = {k: max(1, count(args[k])) for k in keys}
    room = max_tokens - fixed
    for _try in range(6):  # JSON escapes cost more than the text: shrink the room, retry
        if room < 4 * len(keys):
            return None
        total = sum(sizes.values())
        out = dict(args)
        for k in keys:
            out[k] = summarize(args[k], max(1, room * sizes[k] // total))
        result = _compact_json(out)
        n = count(result)
        if n <= max_tokens:
            return result
        room = room * (max_tokens - fixed) * 19 // (20 * (n - fixed + 1)) - 2
    return None


def _head(text: str, n: int = HEAD_LINES) -> str:
    lines = text.split("\n")
    if len(lines) <= n + MIN_ELIDED:
        return text
    return "\n".join([*map(_cut, lines[:n]), f"... (+{len(lines) - n} lines)"])


def _changed(new: str, old: str) -> str:
    """The head of `new` and every line of it that `old` does not hold; the rest elided.
    (A set of lines, not a diff: linear, where difflib is quadratic on long edits.)"""
    lines = new.split("\n")
    if len(lines) <= HEAD_LINES + MIN_ELIDED:
        return new
    before = set(old.split("\n"))
    return _elide(lines, [i < HEAD_LINES or ln not in before for i, ln in enumerate(lines)])


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


NOTE_CHARS = 120  # what a note keeps of one identifying value


def call_placeholder(unit: Unit) -> str:
    """A tool call reduced to what identifies it (path, command, pattern, url, description,
    skill, subagent type) as compact JSON; a call without such keys keeps its first key, cut."""
    try:
        args = json.loads(unit.text)
    except (ValueError, RecursionError):
        line = unit.text.strip().split("\n", 1)[0]
        return _compact_json({"input": _clip(line)})
    if not isinstance(args, dict):
        return "{}"
    kept = {
        k: _clip(v) if isinstance(v, str) else v
        for k, v in args.items()
        if is_identity_key(k) and isinstance(v, (str, int, float, bool))
    }
    if not kept and args:
        k, v = next(iter(args.items()))
        kept = {k: _clip(v if isinstance(v, str) else _compact_json(v), 60)}
    return _compact_json(kept)


def _clip(text: str, n: int = NOTE_CHARS) -> str:
    line = text.strip()
    cut = line.split("\n", 1)[0][:n]
    return cut if cut == line else cut + " ..."


MAX_ERROR_LINES = 40  # an error note keeps at most this many error lines...
ERROR_LINE_CHARS = 300  # ...each cut to this length (the summarizer cuts lines the same way)


# What the cues miss: pytest's "ERROR tests/x.py::t - ..." lines, an exception named
# mid-line ("... - sqlite3.OperationalError: no such table") and a command line tool's
# refusal of its arguments ("cat: illegal option -- A", GNU's "invalid option").
# (Here, not in the cues: the classifier's features read those.)
_MORE_ERRORS = re.compile(
    r"^\s{0,8}(?:ERROR|FAIL|FAILED)\b|\b[A-Z]\w*(?:Error|Exception): |"
    r"\b(?:illegal|invalid|unrecognized|unknown) option\b"
)
# Weaker: a tool's refusal of its input ("base64: invalid input"), a CLI's wrapped error
# ("Error starting session: ...", Go's "huh: error opening TTY: ...", "failed to get action:
# ..."), a failure mark ("❌ ...", bun's "✗ test name"), zsh's "cd: no such file or directory:
# x", a GitHub Actions log's "##[error]", CMake's "CMake Error at CMakeLists.txt:28" /
# "Configuring incomplete, errors occurred!" and bun's closing " 60 fail". Of more error lines
# than a note keeps, these give way to the others (`kept_errors`).
_WEAK_ERRORS = re.compile(
    r"\b(?:invalid|unrecognized|unknown) (?:argument|input)\b|"
    r"(?:^|: )(?:[Ee]rror \w+ing [^:\n]{1,80}|failed to \w+[^:\n]{0,80}): \S|^\s{0,8}[❌✗✘] |"
    r"\bno such file or directory\b|##\[error\]|\bCMake Error\b|\berrors occurred\b|"
    r"^\s{0,8}[1-9]\d* fail\b"
)


# A word every error line the cues know holds (or a `file:line:col: ` position): the cheap
# test that spares the cues' patterns the lines that cannot match them.
_ERROR_WORDS = (
    "err", "fail", "exception", "traceback", "exit", "denied", "not found", "no such",
    "cannot", "reject", "panic", "fatal", "undefined", "not used", "proceed", "syntax",
    "illegal option", "invalid option", "unrecognized option", "unknown option",
    "invalid argument", "invalid input", "conform", "❌", "✗", "✘",
)  # fmt: skip
_POSITION = re.compile(r":\d+:\d+: ")
_MAYBE_ERROR = re.compile(
    "(?i:" + "|".join(map(re.escape, _ERROR_WORDS)) + ")|" + _POSITION.pattern
)


def is_error_line(line: str) -> bool:
    """Whether one line reports an error (looked at up to ERROR_LINE_CHARS)."""
    return error_strength(line) > 0


def error_strength(line: str) -> int:
    """2: the line reports an error as the cues know errors (a traceback, an exception, a
    failing test, a non-zero exit, a rejected call); 1: as the weaker patterns do (a CLI's
    wrapped error, a failure mark, a build tool's error); 0: no error line."""
    head = line[:ERROR_LINE_CHARS]
    if not _maybe_error(head):
        return 0
    if cues.has_error_signal(head) or _MORE_ERRORS.search(head) is not None:
        return 2
    return 1 if _WEAK_ERRORS.search(head) is not None else 0


def _maybe_error(head: str) -> bool:
    """`_MAYBE_ERROR.search(head)`, sooner: on ASCII text a case-insensitive match is a
    substring of the lower-cased text, and `str.find` is several times faster than the
    regex's case-folding alternation (27 vs 6 ms on the lines the summarizer ranks in
    scripts/bench_compress_speed.py). Other text (where case folding has its exceptions)
    takes the regex."""
    if not head.isascii():
        return _MAYBE_ERROR.search(head) is not None
    low = head.lower()
    for word in _ERROR_WORDS:
        if word in low:
            return True
    return ":" in head and _POSITION.search(head) is not None


def error_lines(text: str, limit: int = MAX_ERROR_LINES) -> list[int]:
    """Positions (in `text.split("\\n")`) of the lines that report an error: a traceback
    header, an exception, a failing test, a non-zero exit, a rejected tool call. Each line is
    tested on its own (the cues' patterns may run across lines). Of more than `limit`, those
    `kept_errors` keeps."""
    return kept_errors(_error_lines(text), limit)


def kept_errors(found: list[tuple[int, bool]], limit: int = MAX_ERROR_LINES) -> list[int]:
    """Of the error lines `found` ((position, strong), ascending), the ones an error note
    keeps: all, or when there are more than `limit`, the strong ones first (an exception
    before the 41st failing test's name), then the weak; of more than room is left, the
    first ones and the last quarter (a test run's last lines say how it ended)."""
    if len(found) <= limit:
        return [i for i, _strong in found]
    strong = [i for i, s in found if s]
    if len(strong) >= limit:
        return _ends(strong, limit)
    return sorted(strong + _ends([i for i, s in found if not s], limit - len(strong)))


def _ends(found: list[int], n: int) -> list[int]:
    if len(found) <= n:
        return found
    tail = n // 4
    return found[: n - tail] + found[len(found) - tail :]


def _error_lines(text: str) -> list[tuple[int, bool]]:
    """(position, strong) of every error line, in order."""
    low = text.lower()
    if len(low) != len(text):  # a letter whose lower case is longer: the slow, sure way
        found = ((i, error_strength(ln)) for i, ln in enumerate(text.split("\n")))
        return [(i, s > 1) for i, s in found if s]
    starts: set[int] = set()  # where the lines a cheap test flags start
    for finder in [partial(low.find, w) for w in _ERROR_WORDS] + [_position_finder(text)]:
        i = finder(0)
        while i >= 0:
            starts.add(text.rfind("\n", 0, i) + 1)
            end = text.find("\n", i)
            i = finder(end + 1) if end >= 0 else -1
    out: list[tuple[int, bool]] = []
    line_no, seen = 0, 0  # the line number at offset `seen`
    for start in sorted(starts):
        line_no += text.count("\n", seen, start)
        seen = start
        end = text.find("\n", start)
        strength = error_strength(text[start : end if end >= 0 else len(text)])
        if strength:
            out.append((line_no, strength > 1))
    return out


def _position_finder(text: str) -> Callable[[int], int]:
    def find(pos: int) -> int:
        m = _POSITION.search(text, pos)
        return m.start() if m else -1

    return find


def error_excerpt(text: str, limit: int = MAX_ERROR_LINES) -> str:
    """The error lines of `text`, verbatim (cut to ERROR_LINE_CHARS), each once, gaps marked
    as the extractive summarizer marks them; "" when it has none."""
    # Every compression looks for each tool result's error lines, and a session compressed
    # as it grows brings the same results each time: remembered by a digest of the text (the
    # cues' patterns on the candidate lines took 23 of the 276 ms of a warm run of
    # scripts/bench_compress_speed.py, CPU time)
    key = (hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest(), limit)
    out = _EXCERPTS.get(key)
    if out is None:
        out = _EXCERPTS[key] = _error_excerpt(text, limit)
        if len(_EXCERPTS) > 4096:
            _EXCERPTS.popitem(last=False)
    return out


_EXCERPTS: OrderedDict[tuple[bytes, int], str] = OrderedDict()


def _error_excerpt(text: str, limit: int) -> str:
    lines = text.split("\n")
    seen: set[str] = set()
    keep = []
    for i in error_lines(text, limit):  # a retry loop's error once: its copies add nothing
        line = _cut(lines[i], ERROR_LINE_CHARS)
        if line not in seen:
            seen.add(line)
            keep.append(i)
    out: list[str] = []
    prev = -1
    for i in keep:
        if i - prev > 1:
            out.append(f"[... {i - prev - 1} lines]")
        out.append(_cut(lines[i], ERROR_LINE_CHARS))
        prev = i
    if keep and len(lines) - 1 > prev:
        out.append(f"[... {len(lines) - 1 - prev} lines]")
    return "\n".join(out)


def first_line_excerpt(text: str) -> str:
    """An error that names no error line (a cancelled call, "Skipping edits to x"): its first
    line, gaps marked; "" for a blank text."""
    lines = text.split("\n")
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return ""
    out = [f"[... {first} lines]"] if first else []
    out.append(_cut(lines[first], ERROR_LINE_CHARS))
    if len(lines) - 1 > first:
        out.append(f"[... {len(lines) - 1 - first} lines]")
    return "\n".join(out)


def result_note(unit: Unit) -> str:
    """A tool result reduced to its error lines, else to the placeholder."""
    return error_excerpt(unit.text) or RESULT_PLACEHOLDER


def omitted_note(unit: Unit) -> str:
    """What a text unit left out for length becomes: its role, size and opening words."""
    lines = unit.text.count("\n") + 1
    return f"[a {unit.role} message of {lines} lines left out for length; it began: {_clip(unit.text, 80)}]"


def duplicate_note(unit: Unit) -> str:
    """What a repeated copy of `unit` becomes: a pointer at the copy kept earlier."""
    head = _clip(unit.text, 80)
    return f"[the same text as an earlier {unit.role} message, kept above: {head}]"


__all__ = [
    "IDENTITY_WORDS",
    "RESULT_PLACEHOLDER",
    "STRATEGIES",
    "call_placeholder",
    "duplicate_note",
    "error_excerpt",
    "error_lines",
    "first_line_excerpt",
    "is_error_line",
    "is_fenced",
    "is_identity_key",
    "is_phase_boundary",
    "long_values",
    "omitted_note",
    "outline",
    "phase_note",
    "preserve_structure",
    "result_note",
    "shrink_code",
    "summarize_call",
]
