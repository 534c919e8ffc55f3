"""Heuristic labelling: Snorkel-style labelling functions (LFs) vote a category per unit.

Each LF looks at one unit and its session and votes for one category or abstains. LFs come
in three tiers:

- tier 3, *rules*: structural facts that settle a unit (a boilerplate marker, a failed tool
  result, a compaction summary, a plan tool, an edit call, a housekeeping slash command);
- tier 2, *cues*: text cues (decision words, an announcement, an acknowledgment, a traceback);
- tier 1, *defaults*: what a unit is when nothing more specific fires (by role and kind), and
  the seed's lean: identifiers a unit shares with the session's final answer.

Resolution: the highest tier that voted wins; inside it, the category highest in the taxonomy
(TAXONOMY.md: "when two fit, take the one higher in the table"). The first LF (in `LFS` order)
of that tier voting the winning category is recorded as `label_source` (`lf:<name>`).

    labeler = Labeler()
    labeled = labeler.label(units)           # list[LabeledUnit], input order
    print(LFAnalysis.from_labeled(labeled).summary())
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from winnow.data import cues
from winnow.data.cues import shell_command, tool_input
from winnow.data.schema import CATEGORIES, CATEGORY_INDEX, Unit, as_unit

ABSTAIN = -1


@dataclass
class LabelerConfig:
    """Thresholds of the labelling functions."""

    short_words: int = 12  # assistant prose this short with no other cue is a status note
    note_max_words: int = 25  # uncued assistant prose up to this long falls back to status
    thinking_conclusion_words: int = 75  # uncued thinking this long leans to decision
    announce_max_words: int = 40  # an announcement longer than this is more than a next-step note
    summary_min_words: int = 15  # a "Done. ..." this long that lists specifics is explanation
    final_ref_min_shared: int = 2  # identifiers shared with the final answer to lean must-keep
    architecture_min_ids: int = 2  # architecture words must name this many paths/identifiers
    architecture_min_words: int = 2  # distinct structure words ('handles', 'module', '->') needed
    constraint_max_words: int = 12  # a longer user message is a task that may mention limits
    final_min_words: int = 8  # the final answer is the last assistant text at least this long


# --- session context -------------------------------------------------------------------------


class Session:
    """One session's units plus what LFs ask about them (first request, final answer, calls)."""

    def __init__(self, units: Sequence[Unit], config: LabelerConfig):
        self.units = list(units)
        self.config = config
        self.calls = {u.call_id: u for u in self.units if u.kind == "tool_call" and u.call_id}
        self.first_request = next(
            (i for i, u in enumerate(self.units) if u.role == "user" and _is_request_text(u)),
            None,
        )
        self.final_answer = next(
            (
                i
                for i in range(len(self.units) - 1, -1, -1)
                if self.units[i].role == "assistant"
                and self.units[i].kind == "text"
                and cues.word_count(self.units[i].text) >= config.final_min_words
            ),
            None,
        )

    @cached_property
    def final_ids(self) -> set[str]:
        if self.final_answer is None:
            return set()
        return cues.extract_identifiers(self.units[self.final_answer].text)

    def position(self, i: int) -> float:
        """Relative position in the session, 0 (first unit) to 1 (last)."""
        return i / max(1, len(self.units) - 1)

    def call_of(self, u: Unit) -> Unit | None:
        """The tool call a tool result answers."""
        return self.calls.get(u.call_id) if u.call_id else None


def _is_request_text(u: Unit) -> bool:
    t = u.text
    return (
        u.kind == "text"
        and not u.extra.get("meta")
        and not cues.is_placeholder(t)
        and not cues.is_boilerplate_marker(t)
        and not cues.slash_command(t)
        and not cues.is_compact_request(t)
        and not cues.is_task_notification(t)
        and not cues.is_bash_input(t)
        and not cues.is_acknowledgment(t)
    )


def _call_class(u: Unit, s: Session) -> str | None:
    """Tool class of a call, or of the call a result answers (str_replace_editor view = read)."""
    call = u if u.kind == "tool_call" else s.call_of(u)
    name = u.tool_name or (call.tool_name if call else None)
    cls = cues.tool_class(name)
    if cls == "edit" and call is not None and tool_input(call).get("command") == "view":
        return "read"
    return cls


def _result_of(u: Unit, s: Session, classes: tuple[str, ...]) -> bool:
    """A non-empty result of a tool of one of these classes (an empty one is boilerplate)."""
    return (
        u.kind == "tool_result" and not cues.is_placeholder(u.text) and _call_class(u, s) in classes
    )


# --- labelling functions ---------------------------------------------------------------------

LFFunc = Callable[[Unit, Session, int], "str | None"]


@dataclass(frozen=True)
class LF:
    """A named labelling function: `fn(unit, session, index)` returns a category or None."""

    name: str
    tier: int
    fn: LFFunc

    def __call__(self, u: Unit, s: Session, i: int) -> str | None:
        return self.fn(u, s, i)


LFS: list[LF] = []


def lf(tier: int) -> Callable[[LFFunc], LFFunc]:
    def register(fn: LFFunc) -> LFFunc:
        LFS.append(LF(fn.__name__, tier, fn))
        return fn

    return register


RULE, CUE, DEFAULT = 3, 2, 1


def _prose(u: Unit) -> bool:
    return u.kind in ("text", "thinking")


# Tier 3: rules.


@lf(RULE)
def compact_summary(u: Unit, s: Session, i: int) -> str | None:
    """A context summary injected after a compaction carries the task forward."""
    if u.role in ("user", "system") and _prose(u):
        if u.extra.get("compact_summary") or cues.is_compact_summary(u.text):
            return "requirement"
    return None


@lf(RULE)
def compact_request(u: Unit, s: Session, i: int) -> str | None:
    """The instruction asking for a compaction summary, and the compaction boundary marker."""
    if u.role in ("user", "system") and _prose(u):
        if u.extra.get("compact_boundary") or cues.is_compact_request(u.text):
            return "boilerplate"
    return None


@lf(RULE)
def boilerplate_marker(u: Unit, s: Session, i: int) -> str | None:
    """System reminders, local-command caveats/output, interrupted-request markers."""
    if u.kind != "tool_call" and cues.is_boilerplate_marker(u.text):
        return "boilerplate"
    return None


@lf(RULE)
def slash_command(u: Unit, s: Session, i: int) -> str | None:
    """A work slash command is a requirement; /clear, /model, /cost, /compact are boilerplate."""
    if u.role != "user" or u.kind != "text":
        return None
    cmd = cues.slash_command(u.text)
    if cmd is None:
        return None
    return "boilerplate" if cues.is_housekeeping_command(cmd[0]) else "requirement"


@lf(RULE)
def command_expansion(u: Unit, s: Session, i: int) -> str | None:
    """The instruction text a slash command or skill expands into: a requirement when it carries
    the task (a command, or a skill given ARGUMENTS), else the skill's rules: constraint. The
    hand labels agree on all 18 expansions they hold (data/labels/README.md, conventions)."""
    if u.role == "user" and u.kind == "text" and cues.is_skill_expansion(u.text):
        return cues.expansion_category(u.text)
    return None


@lf(RULE)
def project_instructions(u: Unit, s: Session, i: int) -> str | None:
    """Injected AGENTS.md / CLAUDE.md / user instructions: the project's rules."""
    if u.role in ("user", "system") and u.kind == "text" and cues.is_project_instructions(u.text):
        return "constraint"
    return None


@lf(RULE)
def empty_content(u: Unit, s: Session, i: int) -> str | None:
    """Empty or placeholder content, including an empty tool result."""
    if u.kind != "tool_call" and (cues.is_placeholder(u.text) or u.text.strip() == "[image]"):
        return "boilerplate"
    return None


@lf(RULE)
def tool_error(u: Unit, s: Session, i: int) -> str | None:
    """A tool result the tool marked as an error, or one reporting a non-zero exit."""
    if u.kind == "tool_result" and (u.is_error or cues.exit_code(u.text[:2000])):
        if not cues.is_boilerplate_marker(u.text):  # "[Request interrupted by user]" stays noise
            return "error"
    return None


@lf(RULE)
def plan_call(u: Unit, s: Session, i: int) -> str | None:
    """TodoWrite / update_plan / TaskCreate / ExitPlanMode: a plan adopted."""
    if u.kind == "tool_call" and _call_class(u, s) == "plan":
        return "decision"
    return None


@lf(RULE)
def edit_call(u: Unit, s: Session, i: int) -> str | None:
    """Edit / Write / apply_patch calls, and shell calls that write files."""
    if u.kind != "tool_call":
        return None
    cls = _call_class(u, s)
    if cls == "edit" or (cls == "shell" and cues.shell_command_kind(shell_command(u)) == "write"):
        return "code"
    return None


@lf(RULE)
def fetch_call(u: Unit, s: Session, i: int) -> str | None:
    """Read / Glob / Grep / ls / web calls, shell calls that only look or run tests: bare actions."""
    if u.kind != "tool_call":
        return None
    cls = _call_class(u, s)
    if cls in ("read", "search", "web", "task", "finish"):
        return "status"
    if cls == "shell" and cues.shell_command_kind(shell_command(u)) != "write":
        if _commit_message(u) is None:
            return "status"
    return None


def _commit_message(u: Unit) -> str | None:
    """What `git (?:-C \\S+ )?commit\\b.*?-m\\s+(.+)` captures, in linear time: that regex
    rescans the rest from every `git commit` when no `-m` follows. The first commit decides:
    a `-m` after a later one is after the first one too."""
    command = shell_command(u)
    head = _GIT_COMMIT.search(command)
    m = _COMMIT_MESSAGE.search(command, head.end()) if head else None
    return m.group(1) if m else None


_GIT_COMMIT = re.compile(r"git (?:-C \S+ )?commit\b")
_COMMIT_MESSAGE = re.compile(r"-m\s+(.+)", re.S)


@lf(CUE)
def commit_message(u: Unit, s: Session, i: int) -> str | None:
    """A git commit call is a progress step however long its message, unless the message states
    a root cause or a choice (data/labels/README.md, conventions)."""
    if u.kind != "tool_call" or _call_class(u, s) != "shell":
        return None
    msg = _commit_message(u)
    if msg is None:
        return None
    return "decision" if cues.has_decision_words(msg) else "status"


@lf(RULE)
def read_result(u: Unit, s: Session, i: int) -> str | None:
    """A Read result holds file contents."""
    if _result_of(u, s, ("read",)):
        return "code"
    return None


@lf(RULE)
def search_result(u: Unit, s: Session, i: int) -> str | None:
    """Search hits, directory listings, fetched pages."""
    if _result_of(u, s, ("search", "web")):
        return "tool_output"
    return None


@lf(RULE)
def plan_result(u: Unit, s: Session, i: int) -> str | None:
    """The fixed confirmation a plan tool returns ('Todos have been modified', 'Plan updated'):
    tool output, as every receipt that only confirms (data/labels/README.md, conventions)."""
    if _result_of(u, s, ("plan",)) and u.text.startswith(
        ("Todos have been modified", "Plan updated")
    ):
        return "tool_output"
    return None


@lf(RULE)
def user_answer(u: Unit, s: Session, i: int) -> str | None:
    """The user's answers to an AskUserQuestion-style call steer the work."""
    if _result_of(u, s, ("ask",)):
        return "requirement"
    return None


# Tier 2: cues.


@lf(CUE)
def first_request(u: Unit, s: Session, i: int) -> str | None:
    """The session's first real user message is the task."""
    return "requirement" if i == s.first_request else None


@lf(CUE)
def user_constraint(u: Unit, s: Session, i: int) -> str | None:
    """User 'don't / must / never / only / keep / avoid ...'."""
    if u.role == "user" and u.kind == "text" and cues.has_constraint_words(u.text):
        # "can you add tests so we don't break this?" asks for work, and a pasted issue that
        # says "only" somewhere is a task: both are requirements.
        if cues.word_count(u.text) > s.config.constraint_max_words:
            return None
        if not cues.is_question(u.text) and not cues.starts_with_request(u.text):
            return "constraint"
    return None


@lf(CUE)
def user_question(u: Unit, s: Session, i: int) -> str | None:
    """A question the user wants answered is a requirement."""
    if u.role == "user" and u.kind == "text" and cues.is_question(u.text):
        return "requirement"
    return None


@lf(CUE)
def acknowledgment(u: Unit, s: Session, i: int) -> str | None:
    """'ok', 'got it', 'thanks', 'yes, go ahead', 'continue'."""
    if _prose(u) and u.role in ("user", "assistant") and cues.is_acknowledgment(u.text):
        return "acknowledgment"
    return None


@lf(CUE)
def greeting(u: Unit, s: Session, i: int) -> str | None:
    if _prose(u) and cues.is_greeting(u.text):
        return "boilerplate"
    return None


@lf(CUE)
def pasted_error(u: Unit, s: Session, i: int) -> str | None:
    """A user pasting a traceback or failing output; an error the client printed (system)."""
    if u.role in ("user", "system") and u.kind == "text" and cues.has_error_signal(u.text):
        return "error"
    return None


@lf(CUE)
def housekeeping_noise(u: Unit, s: Session, i: int) -> str | None:
    """Client token/cost lines are boilerplate; `<bash-input>` echoes, status."""
    if u.kind == "tool_call":
        return None
    t = u.text
    if cues.is_client_noise(t):
        return "boilerplate"
    if cues.is_bash_input(t):
        return "status"  # a command the user ran (conventions), unless it states a task
    return None


@lf(CUE)
def task_notification(u: Unit, s: Session, i: int) -> str | None:
    """A background task's completion notice carries its output."""
    if u.kind != "tool_call" and cues.is_task_notification(u.text):
        return "tool_output"
    return None


def _is_work_summary(u: Unit, s: Session) -> bool:
    """'Done. Changed X in a.py, fixed Y; tests pass.': a summary of completed work with specifics."""
    t = u.text.lstrip("*# ")
    return (
        u.role == "assistant"
        and u.kind == "text"
        and cues.word_count(t) >= s.config.summary_min_words
        and (
            cues.is_bare_done(t.split("\n", 1)[0].split(". ", 1)[0] + ".")
            or cues.has_summary_words(t)
        )
        and (cues.has_path(t) or len(cues.extract_identifiers(t)) >= 2)
    )


@lf(CUE)
def decision_words(u: Unit, s: Session, i: int) -> str | None:
    """Assistant 'root cause / the issue is / I'll go with / instead of' (not a work summary)."""
    if u.role == "assistant" and _prose(u) and cues.has_decision_words(u.text):
        if not _is_work_summary(u, s):
            return "decision"
    return None


@lf(CUE)
def architecture_words(u: Unit, s: Session, i: int) -> str | None:
    """'X handles Y', 'module', 'flows into' naming several files or identifiers."""
    if u.role != "assistant" or not _prose(u) or cues.is_announcement(u.text):
        return None
    if cues.architecture_word_count(u.text) >= s.config.architecture_min_words:
        if len(cues.extract_identifiers(u.text)) >= s.config.architecture_min_ids:
            if not _is_work_summary(u, s):
                return "architecture"
    return None


@lf(CUE)
def work_summary(u: Unit, s: Session, i: int) -> str | None:
    """A summary of completed work that lists specifics is explanation."""
    return "explanation" if _is_work_summary(u, s) else None


@lf(CUE)
def announcement(u: Unit, s: Session, i: int) -> str | None:
    """'Let me check the tests first', 'Now I'll run...': a next-step note."""
    if u.role == "assistant" and _prose(u) and cues.is_announcement(u.text):
        if cues.word_count(u.text) <= s.config.announce_max_words:
            return "status"
    return None


@lf(CUE)
def bare_done(u: Unit, s: Session, i: int) -> str | None:
    """A bare 'Done.' / 'All green.'."""
    if u.role == "assistant" and _prose(u) and cues.is_bare_done(u.text):
        return "status"
    return None


@lf(CUE)
def thinking_restates(u: Unit, s: Session, i: int) -> str | None:
    """Thinking that only restates the request ('The user wants X. Let me look at Y')."""
    t = u.text.lstrip()
    if u.kind == "thinking" and t.lower().startswith(("the user", "user wants", "user is")):
        if cues.word_count(t) <= s.config.announce_max_words:
            return "status"
    return None


@lf(CUE)
def thinking_weighs(u: Unit, s: Session, i: int) -> str | None:
    """Thinking that weighs options without choosing."""
    if u.kind == "thinking" and cues.has_weighing_words(u.text):
        if not cues.is_announcement(u.text) and thinking_restates(u, s, i) is None:
            return "explanation"
    return None


@lf(CUE)
def result_error_text(u: Unit, s: Session, i: int) -> str | None:
    """Failing tests, tracebacks, compiler errors in a (non file-read) tool result."""
    if u.kind != "tool_result":
        return None
    cls = _call_class(u, s)
    if cls == "edit" and cues.has_error_signal(u.text[:200]):
        return "error"  # "Your proposed edit has introduced new syntax error(s)"
    if cls not in ("shell", None):
        return None  # file contents and sub-agent reports mention errors without being one
    if cues.has_error_signal(u.text):
        if cues.has_test_pass(u.text) and not cues.has_test_failure(u.text):
            return None  # a passing run that logs errors along the way
        return "error"
    return None


@lf(CUE)
def result_code(u: Unit, s: Session, i: int) -> str | None:
    """An edit result echoing the edited snippet, or a shell result printing a file."""
    if u.kind != "tool_result":
        return None
    cls = _call_class(u, s)
    if cues.has_diff(u.text) or (cls == "edit" and cues.has_code(u.text)):
        return "code"
    if cues.is_file_view(u.text) and u.text.count("\n") > 2:  # a near-empty file says little
        return "code"
    if cls == "shell" and not cues.is_placeholder(u.text):
        call = s.call_of(u)
        if call is not None and cues.shell_reads_file(shell_command(call)):
            return "code"  # file contents, whatever the language (YAML and JSON too)
    return None


@lf(CUE)
def task_report(u: Unit, s: Session, i: int) -> str | None:
    """A sub-agent's report, a launch receipt, a task-bookkeeping receipt ('Task #7 created
    successfully'): tool output (data/labels/README.md, conventions)."""
    if u.kind != "tool_result" or _call_class(u, s) != "task":
        return None
    return "tool_output"


@lf(CUE)
def short_note(u: Unit, s: Session, i: int) -> str | None:
    """Short assistant prose with nothing more to it is a status note."""
    if u.role == "assistant" and _prose(u) and cues.word_count(u.text) <= s.config.short_words:
        if len(cues.extract_identifiers(u.text)) < 2:  # naming specifics is more than a note
            return "status"
    return None


# Tier 1: defaults.


@lf(DEFAULT)
def final_reference(u: Unit, s: Session, i: int) -> str | None:
    """Identifiers referenced again in the final answer lean to requirement (user) / decision (assistant)."""
    if not _prose(u) or i == s.final_answer or u.role not in ("user", "assistant"):
        return None
    if u.role == "assistant" and cues.word_count(u.text) <= s.config.short_words:
        return None
    shared = cues.extract_identifiers(u.text) & s.final_ids
    if len(shared) < s.config.final_ref_min_shared:
        return None
    return "requirement" if u.role == "user" else "decision"


@lf(DEFAULT)
def long_thinking(u: Unit, s: Session, i: int) -> str | None:
    """Long thinking that weighs nothing (thinking_weighs abstained) usually lands on a conclusion."""
    if u.kind == "thinking" and cues.word_count(u.text) >= s.config.thinking_conclusion_words:
        return "decision"
    return None


@lf(DEFAULT)
def by_role_kind(u: Unit, s: Session, i: int) -> str:
    """The fallback every unit gets: user text asks, assistant prose explains, tools output."""
    if u.kind == "tool_call":
        return "status"
    if u.kind == "tool_result":
        return "tool_output"
    if u.role == "system":
        return "boilerplate"
    if u.role == "user":
        return "requirement"
    # Hand labels: uncued assistant prose of a few sentences is mostly a progress note.
    return "status" if cues.word_count(u.text) <= s.config.note_max_words else "explanation"


# --- labeller --------------------------------------------------------------------------------


@dataclass(slots=True)
class LabeledUnit:
    """A unit, its category, the LF that decided it and every LF's vote."""

    unit: Unit
    category: str
    label_source: str
    votes: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.unit.to_dict(),
            "category": self.category,
            "label_source": self.label_source,
            "label_votes": len(self.votes),
        }


class Labeler:
    """Label units with the LFs, session by session; see the module docstring for the policy."""

    def __init__(self, config: LabelerConfig | None = None, lfs: Sequence[LF] | None = None):
        self.config = config or LabelerConfig()
        self.lfs = list(LFS if lfs is None else lfs)

    def label(self, units: Iterable[Unit | Mapping[str, Any]]) -> list[LabeledUnit]:
        """Label every unit; returns one `LabeledUnit` per input unit, in input order."""
        given = [as_unit(u) for u in units]
        sessions: dict[str, list[int]] = defaultdict(list)
        for pos, u in enumerate(given):
            sessions[u.session_id].append(pos)
        out: list[LabeledUnit | None] = [None] * len(given)
        for positions in sessions.values():
            positions.sort(key=lambda p: (given[p].index, p))
            session = Session([given[p] for p in positions], self.config)
            for i, p in enumerate(positions):
                out[p] = self.label_one(session, i)
        return out  # type: ignore[return-value]

    def label_one(self, session: Session, i: int) -> LabeledUnit:
        u = session.units[i]
        votes: list[tuple[LF, str]] = []
        for f in self.lfs:
            c = f(u, session, i)
            if c is not None:
                votes.append((f, c))
        if not votes:
            return LabeledUnit(u, "explanation", "none", ())
        top = max(f.tier for f, _ in votes)
        winner = min((c for f, c in votes if f.tier == top), key=CATEGORY_INDEX.__getitem__)
        source = next(f.name for f, c in votes if f.tier == top and c == winner)
        return LabeledUnit(u, winner, f"lf:{source}", tuple((f.name, c) for f, c in votes))


# The columns `winnow label` adds to a table of units from `winnow extract`.
LABEL_COLUMNS = ("category", "label_source", "label_votes", "hand_label")


def with_label_columns(table: Any, labeled: Sequence[LabeledUnit]) -> Any:
    """A pyarrow table of units with the label columns of `labeled` (one per row, in row
    order) added, replacing any it had."""
    import pyarrow as pa

    table = table.drop_columns([c for c in LABEL_COLUMNS if c in table.column_names])
    for name, values, typ in (
        ("category", [lu.category for lu in labeled], pa.string()),
        ("label_source", [lu.label_source for lu in labeled], pa.string()),
        ("label_votes", [len(lu.votes) for lu in labeled], pa.int32()),
        ("hand_label", [lu.label_source == "hand" for lu in labeled], pa.bool_()),
    ):
        table = table.append_column(name, pa.array(values, typ))
    return table


# --- analysis --------------------------------------------------------------------------------


@dataclass
class LFAnalysis:
    """Per-LF coverage, overlaps and conflicts (as Snorkel's LFAnalysis) plus the label distribution.

    `votes` is an (n_units, n_lfs) matrix of category indices, -1 where an LF abstained.
    """

    votes: np.ndarray
    lf_names: list[str]
    decided: np.ndarray  # (n_units,) index of the deciding LF, -1 for hand labels / none
    categories: list[str] = field(default_factory=list)

    @classmethod
    def from_labeled(
        cls, labeled: Sequence[LabeledUnit], lfs: Sequence[LF] | None = None
    ) -> LFAnalysis:
        names = [f.name for f in (LFS if lfs is None else lfs)]
        col = {n: j for j, n in enumerate(names)}
        L = np.full((len(labeled), len(names)), ABSTAIN, dtype=np.int16)
        decided = np.full(len(labeled), -1, dtype=np.int16)
        for r, lu in enumerate(labeled):
            for name, c in lu.votes:
                if name in col:
                    L[r, col[name]] = CATEGORY_INDEX[c]
            src = lu.label_source.removeprefix("lf:")
            decided[r] = col.get(src, -1)
        return cls(L, names, decided, [lu.category for lu in labeled])

    def coverage(self) -> np.ndarray:
        """Share of units each LF votes on."""
        return (
            (self.votes != ABSTAIN).mean(axis=0)
            if len(self.votes)
            else np.zeros(len(self.lf_names))
        )

    def overlaps(self) -> np.ndarray:
        """Share of units where the LF and at least one other LF vote."""
        voted = self.votes != ABSTAIN
        others = voted.sum(axis=1, keepdims=True) - voted
        return (
            (voted & (others > 0)).mean(axis=0) if len(self.votes) else np.zeros(len(self.lf_names))
        )

    def conflicts(self) -> np.ndarray:
        """Share of units where the LF and another LF vote different categories."""
        if not len(self.votes):
            return np.zeros(len(self.lf_names))
        out = np.zeros(len(self.lf_names))
        voted = self.votes != ABSTAIN
        for j in range(len(self.lf_names)):
            mine = self.votes[:, j : j + 1]
            differ = voted & (self.votes != mine)
            differ[:, j] = False
            out[j] = (voted[:, j] & differ.any(axis=1)).mean()
        return out

    def decided_share(self) -> np.ndarray:
        """Share of units whose label each LF decided."""
        n = max(1, len(self.decided))
        return np.bincount(self.decided[self.decided >= 0], minlength=len(self.lf_names)) / n

    def polarity(self) -> list[list[str]]:
        """Categories each LF voted for."""
        return [
            [
                CATEGORIES[c]
                for c in sorted(set(self.votes[:, j][self.votes[:, j] != ABSTAIN].tolist()))
            ]
            for j in range(len(self.lf_names))
        ]

    def summary(self) -> list[dict[str, Any]]:
        """One row per LF: name, polarity, coverage, overlaps, conflicts, decided."""
        cov, ovl, con, dec, pol = (
            self.coverage(),
            self.overlaps(),
            self.conflicts(),
            self.decided_share(),
            self.polarity(),
        )
        return [
            {
                "lf": n,
                "polarity": pol[j],
                "coverage": float(cov[j]),
                "overlaps": float(ovl[j]),
                "conflicts": float(con[j]),
                "decided": float(dec[j]),
            }
            for j, n in enumerate(self.lf_names)
        ]

    def label_distribution(self) -> Counter:
        return Counter(self.categories)


# --- hand labels -----------------------------------------------------------------------------


@dataclass
class LabelJoin:
    """Labels read from `{"id", "category"}` JSONL files."""

    labels: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    # file -> how many of its ids are not in `known_ids`: labels of other data, not bad lines
    unknown: Counter = field(default_factory=Counter)


def load_labels(paths: Iterable[str | Path], known_ids: set[str] | None = None) -> LabelJoin:
    """Read label files; bad lines become one-line problems `file:line: why`, the rest still count.

    Ids not in `known_ids` (labels of units outside the data at hand) are counted per file in
    `unknown`, not reported one by one.

    When several files label the same id the first file's label wins (files are read in the
    order given) and each disagreement is reported.
    """
    out = LabelJoin()
    origin: dict[str, str] = {}
    for path in paths:
        path = Path(path)
        # utf-8-sig: an editor's byte order mark is not part of the first label
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    out.problems.append(f"{where}: invalid JSON ({e.msg}), line skipped")
                    continue
                except RecursionError:
                    out.problems.append(f"{where}: JSON nested too deeply, line skipped")
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                    out.problems.append(f'{where}: no string "id", line skipped')
                    continue
                uid, cat = rec["id"], rec.get("category")
                if cat not in CATEGORY_INDEX:
                    out.problems.append(f"{where}: unknown category {cat!r}, line skipped")
                    continue
                if known_ids is not None and uid not in known_ids:
                    out.unknown[str(path)] += 1
                    continue
                if uid in out.labels:
                    if out.labels[uid] != cat:
                        out.disagreements.append(
                            f"{where}: {uid} is {cat!r} here but {out.labels[uid]!r} in {origin[uid]}; kept {out.labels[uid]!r}"
                        )
                    continue
                out.labels[uid] = cat
                origin[uid] = where
    return out


def apply_labels(labeled: Sequence[LabeledUnit], labels: Mapping[str, str]) -> int:
    """Override heuristic labels with given ones (`label_source='hand'`); returns how many matched."""
    n = 0
    for lu in labeled:
        cat = labels.get(lu.unit.id)
        if cat is not None:
            lu.category, lu.label_source = cat, "hand"
            n += 1
    return n


# --- evaluation against hand labels ----------------------------------------------------------


@dataclass
class LabelerReport:
    """Accuracy and per-category precision / recall / F1 of predicted labels against gold."""

    n: int
    accuracy: float
    per_category: dict[str, dict[str, float]]
    confusion: np.ndarray  # gold rows x predicted columns, CATEGORIES order
    macro_f1: float


def evaluate_labeler(predicted: Mapping[str, str], gold: Mapping[str, str]) -> LabelerReport:
    """Compare `{id: category}` predictions with `{id: category}` gold on the ids they share."""
    ids = [i for i in gold if i in predicted]
    k = len(CATEGORIES)
    cm = np.zeros((k, k), dtype=np.int64)
    for i in ids:
        cm[CATEGORY_INDEX[gold[i]], CATEGORY_INDEX[predicted[i]]] += 1
    tp = np.diag(cm).astype(float)
    support, pred_n = cm.sum(axis=1), cm.sum(axis=0)
    prec = np.divide(tp, pred_n, out=np.zeros(k), where=pred_n > 0)
    rec = np.divide(tp, support, out=np.zeros(k), where=support > 0)
    f1 = np.divide(2 * prec * rec, prec + rec, out=np.zeros(k), where=(prec + rec) > 0)
    per = {
        c: {"precision": prec[j], "recall": rec[j], "f1": f1[j], "support": int(support[j])}
        for j, c in enumerate(CATEGORIES)
    }
    present = support > 0
    return LabelerReport(
        n=len(ids),
        accuracy=float(tp.sum() / len(ids)) if ids else 0.0,
        per_category=per,
        confusion=cm,
        macro_f1=float(f1[present].mean()) if present.any() else 0.0,
    )


__all__ = [
    "LF",
    "LFS",
    "LFAnalysis",
    "LabelJoin",
    "LabeledUnit",
    "Labeler",
    "LabelerConfig",
    "LabelerReport",
    "Session",
    "apply_labels",
    "evaluate_labeler",
    "load_labels",
]
