"""Text cues shared by the heuristic labeller and the classifier's hand features.

Every cue is one regex compiled at import and a small pure function over a string, so a cue
costs one scan of the text. Names here are a stable API: the classifier builds its feature
vector from them (`CUE_FUNCTIONS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from winnow.data.schema import Unit

_I = re.IGNORECASE
_IM = re.IGNORECASE | re.MULTILINE

# --- code ------------------------------------------------------------------------------------

_FENCE = re.compile(r"```")
_DIFF = re.compile(
    r"^(?:@@ .* @@|\+\+\+ |--- a/|diff --git |\*\*\* (?:Begin Patch|Update File|Add File))", re.M
)
# Linear time (every regex here is: tests/test_hostile.py). A line's indent is taken by
# `(?=(X*))\1`, an atomic group that works before Python 3.11, and never includes a newline:
# `^\s*` would run on over blank lines from every line start of a blank run (quadratic), and
# backtracking into the indent would rescan the line once per indent character. A code word
# can only start at the first non-blank character, so the matches are counted the same.
_INDENT = r"^(?=([^\S\n]*))\1"  # the pattern's first group
_CODE_LINE = re.compile(
    _INDENT + r"(?:def |class |fn |func |function |import |from \S+ import |#include|package |pub |"
    r"const |let |var |return\b|if \(|for \(|while \(|async |export |public |private |"
    r"@\w+|[}\]);]+\s*$|.*[;{]\s*$|.*\)\s*(?:->|:|\{)\s*$"
    r"|\d+→)",  # Claude Code's numbered Read output
    re.M,
)


def has_diff(text: str) -> bool:
    """A unified diff or an apply_patch envelope."""
    return _DIFF.search(text) is not None


def has_code(text: str) -> bool:
    """Fenced code, a diff/patch, or at least three code-like lines."""
    if _FENCE.search(text) or _DIFF.search(text):
        return True
    return code_line_count(text) >= 3


def code_line_count(text: str) -> int:
    """Number of lines that look like source code."""
    return sum(1 for _ in _CODE_LINE.finditer(text))


def code_line_ratio(text: str) -> float:
    """Share of non-blank lines that look like source code."""
    lines = sum(1 for ln in text.splitlines() if ln.strip())
    return code_line_count(text) / lines if lines else 0.0


# --- errors and test results -----------------------------------------------------------------

_ERROR = re.compile(
    r"Traceback \(most recent call last\)|" + _INDENT + r"(?:\w+\.)*\w*(?:Error|Exception):|"
    r"\bFAILED\b|^FAIL\b|"
    r"^--- FAIL|\bpanic: |^fatal: |^(?i:error)(?:\[\w+\])?: |\bERR!|command not found|"
    r"No such file or directory|(?i:exit (?:code|status)) [1-9]\d*|\bexited with (?:code )?[1-9]|"
    r"\b[1-9]\d* (?:failed|errors?)\b|\bcompilation failed|Permission denied|cannot find (?:module|package)|"
    r"introduced new syntax error|imported and not used|^\S+\.\w+:\d+:\d+: \S|did not conform to the edit format|"
    r"^\S+:\d+:\d+: (?i:error)|undefined: \w|"
    r"The user doesn't want to proceed|tool use was rejected|<tool_use_error>|String to replace not found",
    re.M,
)
_EXIT_NONZERO = re.compile(
    r"(?:Exit code|exit code|exit status|Process exited with code) ([1-9]\d*)"
)
_TEST_PASS = re.compile(
    r"\b\d+ passed\b|^ok\s+\S|^PASS\b|\ball (?:\d+ )?tests? pass|\b0 (?:issues|errors|failures)\b|"
    r"\bTests?:\s+\d+ passed|✓",
    _IM,
)


def has_error_signal(text: str) -> bool:
    """A traceback, failing test, non-zero exit, compiler error or rejected tool call."""
    return _ERROR.search(text) is not None


def exit_code(text: str) -> int | None:
    """The non-zero exit code a tool result reports, if any."""
    m = _EXIT_NONZERO.search(text)
    return int(m.group(1)) if m else None


_TEST_FAIL = re.compile(
    r"\b[1-9]\d* (?:failed|failing|failures?)\b|^FAIL\b|\bFAILED\b|^--- FAIL|\bERROR task failed",
    re.M,
)


def has_test_failure(text: str) -> bool:
    """A failing test count or FAIL/FAILED marker."""
    return _TEST_FAIL.search(text) is not None


def has_test_pass(text: str) -> bool:
    """A passing test or lint run summary."""
    return _TEST_PASS.search(text) is not None


# --- paths, urls, identifiers ----------------------------------------------------------------

_SOURCE_EXT = r"\.(?:py|go|ts|tsx|js|jsx|rs|java|kt|rb|c|h|cpp|cs|md|json|ya?ml|toml|sh|ps1|sql|html|css|txt|cfg|ini|lock)\b"
_PATH = re.compile(
    r"(?<![\w/.-])(?:[A-Za-z]:\\|\.{0,2}/)?(?:[\w.-]+[/\\])+[\w.-]+|"
    r"(?<![\w/.-])[\w-]+" + _SOURCE_EXT
)
# What every match of _PATH holds: a separator (its first form), or a source file's extension
# (its second). Most lines hold neither, and these rule them out several times sooner than
# _PATH's lookbehind at every position (has_path).
_EXTENSION = re.compile(_SOURCE_EXT)
_URL = re.compile(r"https?://\S+")
# A call `name(`: the name is a run of word characters and dots right before "(". The
# leftmost start that `\b([A-Za-z_][\w.]*[A-Za-z_0-9])\(` would take in a run is found once
# per run (that regex rescans the run from every start in it: quadratic on "a.a.a.a...").
_CALL_RUN = re.compile(r"(?<![\w.])[\w.]+(?=\()")
_NAME_START = re.compile(r"(?:^|(?<=\.))[A-Za-z_]")
_BACKTICK = re.compile(r"`([^`\s]{3,80})`")
_TICKET = re.compile(r"\b[A-Z][A-Z0-9]{1,9}-\d+\b|(?<![\w&])#\d{2,6}\b")
_CAMEL = re.compile(
    r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b|\b(?:[A-Z][a-z0-9]+){2,}\b|\b[a-z]+(?:_[a-z0-9]+){1,}\b"
)
# Words that look like identifiers but say nothing about the task.
_STOP_IDS = frozenset({"e.g", "i.e", "etc", "print", "len", "str", "int", "list", "dict", "self"})


def _call_names(text: str) -> list[str]:
    """The names of calls (`pkg.fn(`, `obj.method(`) in a text."""
    names = []
    for m in _CALL_RUN.finditer(text):
        run = m.group()
        start = _NAME_START.search(run)  # the first start at a word boundary
        # two characters at least, the last ASCII (`[A-Za-z_0-9]` before the "(")
        if start and start.start() < len(run) - 1 and run[-1].isascii() and run[-1] != ".":
            names.append(run[start.start() :])
    return names


def has_path(text: str) -> bool:
    """A file path (with a directory part or a known source extension)."""
    if "/" not in text and "\\" not in text and _EXTENSION.search(text) is None:
        return False
    return _PATH.search(text) is not None


def has_url(text: str) -> bool:
    return _URL.search(text) is not None


def extract_identifiers(text: str) -> set[str]:
    """Paths (and their file names), function names, backticked names, ticket ids, compound identifiers."""
    ids: set[str] = set()
    for m in _PATH.finditer(text):
        p = m.group(0).replace("\\", "/").rstrip(".")
        ids.add(p)
        ids.add(p.rsplit("/", 1)[-1])
    ids.update(name.strip("().") for name in _call_names(text))
    ids.update(m.group(1).strip("().") for m in _BACKTICK.finditer(text))
    ids.update(m.group(0) for m in _TICKET.finditer(text))
    ids.update(m.group(0) for m in _CAMEL.finditer(text))
    return {i for i in ids if len(i) >= 4 and i.lower() not in _STOP_IDS}


# --- what a message asks, limits, decides, explains ------------------------------------------

_REQUIREMENT = re.compile(
    r"\b(?:add|implement|fix|create|make|build|write|update|change|remove|delete|rename|refactor|"
    r"support|migrate|investigate|review|need(?:s|ed)? to|should|want|please|can you|could you|"
    r"would you|let's|how (?:do|does|can|should)|why (?:is|does|do)|what (?:is|does))\b",
    _I,
)
_CONSTRAINT = re.compile(
    r"\b(?:don'?t|do not|must(?:n'?t| not)?|never|only|keep|without|avoid|no more than|at most|"
    r"at least|not allowed|forbidden|make sure|ensure|always|backward[s]?[- ]compatible|"
    r"stick to|limit(?:ed)? to|shouldn'?t|can'?t use|required|python 3\.\d+|node \d+)\b",
    _I,
)
_DECISION = re.compile(
    r"\b(?:root cause|the (?:real )?(?:issue|problem|bug|culprit|cause) (?:is|was)(?! (?:fixed|resolved|related|still|not|now))|the fix (?:is|was)|"
    r"turns out|i'?ll go with|we'?ll go with|going with|decided|decision|instead of|rather than|"
    r"the (?:best|right|simplest|cleanest) (?:approach|fix|option|way)|i'?ll use|let'?s use|"
    r"won'?t work|doesn'?t work because|ruled out|not the (?:cause|issue|problem)|that'?s why|"
    r"this (?:means|explains)|found (?:it|the (?:issue|problem|bug|cause))|i see the (?:issue|problem|bug)|the plan|plan:|"
    r"approach:|conclusion|so the (?:issue|problem|fix)|caused by)\b|, not (?:the|a|an) \w",
    _I,
)
_ARCHITECTURE = re.compile(
    r"\b(?:handles?|is responsible for|responsible for|module|component|flows? (?:into|to|through)|"
    r"data flow|entry ?point|delegates? to|calls? (?:into|the)|wires?|layer|interface|architecture|"
    r"pipeline|registry|dispatch(?:es)?|is (?:defined|implemented) in|lives in|owns|"
    r"consists of|is composed of|sits (?:between|on top of))\b|\w\s+(?:->|→)\s+\w",
    _I,
)
_WEIGHING = re.compile(
    r"\b(?:option [a-c1-3]|alternatively|on the other hand|either .{1,60} or|could (?:also|either)|"
    r"trade-?off|pros and cons|maybe|might|perhaps|not sure|whether)\b",
    _I,
)
_QUESTION = re.compile(r"\?\s*$|\?\s*\n", re.M)


_REQUEST_START = re.compile(
    r"\W*(?:(?:also|and|now|ok(?:ay)?|then)[, ]+)?(?:please |pls )?(?:can|could|would|will) (?:you|we)\b|"
    r"\W*(?:(?:also|and|now|ok(?:ay)?|then)[, ]+)?(?:please )?(?:add|implement|fix|create|write|make|build|update|"
    r"change|remove|refactor|rename|move|run|test|check|investigate|review)\b",
    re.IGNORECASE,
)


def starts_with_request(text: str) -> bool:
    """Opens as an ask: 'can you...', 'please add...', 'also fix...'."""
    return _REQUEST_START.match(text) is not None


def has_requirement_words(text: str) -> bool:
    """Imperatives and asks: add, fix, implement, can you, should, want, how do..."""
    return _REQUIREMENT.search(text) is not None


def has_constraint_words(text: str) -> bool:
    """Limits on how: don't, must, never, only, keep, avoid, backward compatible, versions."""
    return _CONSTRAINT.search(text) is not None


_HEDGE = re.compile(
    r"\b(?:could|might|may|maybe|perhaps|possibly|probably|likely|if|whether|check|verify)\b", _I
)
_SENTENCE_START = re.compile(r"[.!?\n][^.!?\n]*$")


def has_decision_words(text: str) -> bool:
    """Conclusions and choices: root cause, the issue is, I'll go with, instead of, turns out.

    A phrase hedged earlier in its sentence ("this could be the root cause") does not count.
    """
    for m in _DECISION.finditer(text):
        head = text[max(0, m.start() - 200) : m.start()]
        cut = _SENTENCE_START.search(head)
        if not _HEDGE.search(head[cut.start() :] if cut else head):
            return True
    return False


def has_architecture_words(text: str) -> bool:
    """Structure: X handles Y, module, component, flows into, entry point, A -> B."""
    return _ARCHITECTURE.search(text) is not None


def architecture_word_count(text: str) -> int:
    """Distinct structure words and arrows ('handles', 'module', 'A -> B') in a text."""
    return len({m.group(0).lower() for m in _ARCHITECTURE.finditer(text)})


def has_weighing_words(text: str) -> bool:
    """Deliberation without a choice: alternatively, either/or, maybe, trade-off, whether."""
    return _WEIGHING.search(text) is not None


def is_question(text: str) -> bool:
    return _QUESTION.search(text) is not None


# --- short turns: acknowledgments, announcements, bare completions ---------------------------

_ACK = re.compile(
    r"^\W*(?:ok(?:ay)?|k|got it|thanks?(?: you)?|thx|ty|sure|continue|go on|go ahead|proceed|"
    r"yes|yep|yeah|yup|y|no|nope|correct|right|exactly|great|perfect|nice|cool|good|awesome|"
    r"sounds good|looks good|lgtm|do it|please do|ship it|approved?|understood|agreed|fine|"
    r"that works|works|👍|✅|🙏)"
    r"(?:[\s,.!]+(?:ok(?:ay)?|thanks?(?: you)?|go ahead|please|do it|continue|proceed|sure|"
    r"yes|great|perfect|good|that works|let's do it|sounds good|lgtm))*\W*$",
    _I,
)
_ANNOUNCE = re.compile(
    # the leading space atomic (see _INDENT): given back, each space was tried as a lead-in's
    # start, 80 characters each (a 16 KB run of spaces: 56 ms a match, 0.3 ms atomic)
    r"^(?=(\s*))\1(?:[^!?\n]{1,80}?[.!]\s+)?"  # a short lead-in: "The filter.go changes look good."
    r"(?:(?:now|next|first|ok(?:ay)?|good|great|perfect|alright)[,.!]?\s+)?"
    r"(?:let me|let's|i'?ll|i will|i'?m going to|i need to|now (?:i'?ll|let me|let's|update|add|run|fix|check)|"
    r"going to|moving on to|verifying|confirming|i should (?:check|look|read|run|verify|search|see)|checking|looking at|reading|running|searching)\b",
    _I,
)
_DONE = re.compile(
    r"^\W*(?:done|all done|fixed|finished|complete[d]?|all set|committed|pushed|updated|"
    r"all (?:tests )?pass(?:ing)?|all green|all clean|looks good|compiles(?: clean)?)\W*$",
    _I,
)
_GREETING = re.compile(
    r"^\W*(?:hi|hello|hey|good (?:morning|afternoon|evening))(?: there)?\W*$", _I
)


# "(Y)es/(N)o ... ]: answer" at the end: the prompt, then its tail searched after it
_YES_NO = re.compile(r"\(Y\)es/\(N\)o")
_PROMPT_TAIL = re.compile(r"\]:(?=(\s*))\1(?=(\w*))\2\s*$")  # atomic runs: see _INDENT


def _yes_no_prompt(text: str) -> bool:
    m = _YES_NO.search(text)
    return m is not None and _PROMPT_TAIL.search(text, m.end()) is not None


def is_acknowledgment(text: str) -> bool:
    """A short 'ok', 'got it', 'thanks', 'sure', 'yes, go ahead', 'continue', or a y/n prompt answer."""
    if len(text) > 80:
        return len(text) <= 400 and _yes_no_prompt(text)
    return _ACK.match(text.strip()) is not None or _yes_no_prompt(text)


def is_announcement(text: str) -> bool:
    """Starts like a next-step note: 'Let me check...', 'Now I'll...', 'Running the tests'."""
    return _ANNOUNCE.match(text) is not None


_SUMMARY = re.compile(
    r"here'?s (?:a |the )?(?:summary|what (?:changed|i did|was done))|summary of (?:the )?changes|"
    r"^#+ *(?:summary|changes made|what (?:changed|shipped))|changes made:|to summari[sz]e|"
    # the lead-in is the line's own non-word characters, atomic: see _INDENT
    r"^(?=([^\w\n]*))\1(?:(?:perfect|great|done|excellent)\W+)?(?:i'?ve|i have|we'?ve) (?:now )?(?:successfully )?"
    r"(?:added|updated|fixed|changed|removed|created|implemented|made|applied|refactored|resolved|completed)",
    _IM,
)


def has_summary_words(text: str) -> bool:
    """Opens a summary of work: "Here's a summary", "## Changes made", "To summarize"."""
    return _SUMMARY.search(text) is not None


def is_bare_done(text: str) -> bool:
    """'Done.', 'Fixed!', 'All green.' and nothing else."""
    return len(text) <= 40 and _DONE.match(text.strip()) is not None


def is_greeting(text: str) -> bool:
    return len(text) <= 40 and _GREETING.match(text.strip()) is not None


def word_count(text: str) -> int:
    return len(text.split())


# --- boilerplate and wrappers ----------------------------------------------------------------

_BOILERPLATE = re.compile(
    r"^\s*(?:<system-reminder>|<local-command-caveat>|<local-command-stdout>|<local-command-stderr>|"
    r"<bash-stdout>|<bash-stderr>|<user-prompt-submit-hook>|<environment_context>|"
    r"<permissions instructions>|\[Request interrupted by user[^\]]*\]|Caveat: The messages below)",
    _I,
)
_PLACEHOLDER = re.compile(
    r"^\s*(?:\(no (?:content|output)\)|no output|\[no output\]|\(empty\)|null|none|\{\}|\[\]|"
    r"tool ran without output|<system>tool ran without output</system>|\(\w+ completed with no output\)|"
    r"<shellId: \d+ completed with exit code 0>|<command with id: \d+ stopped>)?\s*$",
    _I,
)
_EXEC_HEADER = re.compile(
    r"^(?:Chunk ID: \w+\s+)?Wall time: [\d.]+ seconds\s+"
    r"Process (?:exited with code 0|running with session ID \d+)\s+"
    r"(?:Original token count: \d+\s+)?Output:\s*"
)
_COMMAND_NAME = re.compile(r"<command-name>\s*/?([^<\s]+)\s*</command-name>")
_SLASH = re.compile(r"^\s*/([a-z][\w:-]*)(?:\s+(.*))?$", re.S | re.I)
_BASH_INPUT = re.compile(r"^\s*<bash-input>", re.I)
_TASK_NOTIFICATION = re.compile(r"^\s*<task-notification>", re.I)
_COMPACT_SUMMARY = re.compile(
    r"^\s*This session is being continued from a previous conversation|^\s*<summary>|^\s*Summary of the conversation so far",
    _I,
)
_COMPACT_REQUEST = re.compile(
    r"Your task is to create a detailed summary of the conversation|"
    r"summari[sz]e the conversation so far|create a handoff summary|CONTEXT CHECKPOINT COMPACTION",
    _I,
)
_SKILL_EXPANSION = re.compile(r"^\s*(?:Base directory for this skill:|<command-message>)", _I)

# Housekeeping commands: they manage the client, not the work (TAXONOMY boundary rules).
HOUSEKEEPING_COMMANDS = frozenset(
    {
        "clear", "compact", "model", "cost", "ide", "help", "config", "login", "logout", "status",
        "resume", "exit", "quit", "memory", "permissions", "doctor", "vim", "terminal-setup",
        "context", "usage", "hooks", "mcp", "agents", "theme", "bug", "export", "rewind",
        "statusline", "add-dir", "release-notes", "upgrade", "privacy-settings", "fast",
    }
)  # fmt: skip


_PROJECT_INSTRUCTIONS = re.compile(
    r"^\s*(?:# (?:AGENTS|CLAUDE|GEMINI)\.md instructions|<user_instructions>|<INSTRUCTIONS>)", _I
)


_CLIENT_NOISE = re.compile(
    r"^\s*(?:Tokens: \S+ sent, |\^C again to exit|Aider v\d|Main model: |Weak model: )"
)


def is_client_noise(text: str) -> bool:
    """Status lines a client prints (token and cost counts, banners, exit hints)."""
    return _CLIENT_NOISE.match(text) is not None


_FILE_VIEW = re.compile(
    r"^\s*(?:\[File: .{1,300} \(\d+ lines total\)\]|Here's the result of running `cat -n` on )"
)


def is_file_view(text: str) -> bool:
    """A file viewer's output: '[File: a.py (10 lines total)]', "Here's the result of running `cat -n`"."""
    return _FILE_VIEW.match(text) is not None


def is_project_instructions(text: str) -> bool:
    """Injected project rules (AGENTS.md / CLAUDE.md / user instructions)."""
    return _PROJECT_INSTRUCTIONS.match(text) is not None


def is_boilerplate_marker(text: str) -> bool:
    """System reminders, local-command caveats and output, interrupted-request markers, injected instructions."""
    return _BOILERPLATE.match(text) is not None


def is_placeholder(text: str) -> bool:
    """Empty, whitespace or a placeholder such as '(no content)' / 'Tool ran without output'."""
    if len(text) > 200:
        return False
    return _PLACEHOLDER.match(_EXEC_HEADER.sub("", text, count=1)) is not None


def strip_exec_header(text: str) -> str:
    """A Codex exec result without its 'Chunk ID / Wall time / exit code / Output:' header."""
    return _EXEC_HEADER.sub("", text, count=1)


def slash_command(text: str) -> tuple[str, str] | None:
    """`(name, args)` of a slash command, wrapped (`<command-name>`) or typed (`/review 12`)."""
    m = _COMMAND_NAME.search(text)
    if m:
        # the first <command-args> and the first closing tag after it (a regex would rescan
        # the rest from every opening tag when none is closed)
        start = text.find("<command-args>")
        end = text.find("</command-args>", start + 14) if start >= 0 else -1
        return m.group(1).lower(), (text[start + 14 : end].strip() if end >= 0 else "")
    m = _SLASH.match(text)
    if m and "/" not in m.group(1) and len(text) < 2000:
        return m.group(1).lower(), (m.group(2) or "").strip()
    return None


def is_housekeeping_command(name: str) -> bool:
    return name.lower().lstrip("/") in HOUSEKEEPING_COMMANDS


def is_settled_boilerplate(unit: Unit) -> bool:
    """Whether TAXONOMY.md itself calls the unit boilerplate, whatever a model says: harness
    noise (a system reminder, a local command's caveat or output, an interrupted-request
    marker), a housekeeping slash command (/clear, /model, /cost, /compact), empty or
    placeholder content. A call, or a unit carrying media (an image's text is a placeholder),
    never is. The hand labels agree on 371 of the 375 units it settles."""
    if unit.kind == "tool_call" or unit.extra.get("media_tokens"):
        return False
    text = unit.text or ""
    if is_boilerplate_marker(text) or is_placeholder(text):
        return True
    if unit.role == "user" and unit.kind == "text":
        cmd = slash_command(text)
        return cmd is not None and is_housekeeping_command(cmd[0])
    return False


# Harness texts the hand-feature spec does not mark (adding them to _BOILERPLATE would change
# what a served model's `boilerplate_marker` feature means): Codex's mode and catalogue notes.
_HARNESS_NOTE = re.compile(
    r"^\s*<(?:collaboration_mode|apps_instructions|skills_instructions|plugins_instructions)>"
)
# A client printing the exception its provider call raised: `litellm.APIError: ...`.
_CLIENT_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception):")


def settled_category(unit: Unit) -> str | None:
    """The category TAXONOMY.md and the hand-label conventions (data/labels/README.md) give a
    unit outright, whatever a model says, or None:

    - boilerplate: as `is_settled_boilerplate`, Codex's mode and catalogue notes, and what
      the harness marks a demonstration (SWE-agent's `is_demo`);
    - constraint: injected project rules (AGENTS.md / CLAUDE.md instructions), a skill launched
      without a task; requirement: a skill or command expansion that carries the task
      (`skill_arguments`);
    - error: an exception a client prints as a system message;
    - acknowledgment: the user's answer to a client's (Y)es/(N)o prompt;
    - tool_output: a sub-agent's launch receipt.

    The hand labels agree on all 116 units these rules settle beyond boilerplate's (and on the
    29 read rule files `Settler` adds, and both of SWE-agent's demonstrations); models trained
    without a source's harness miss most of them (`winnow evaluate --by-source`)."""
    if is_settled_boilerplate(unit) or unit.extra.get("is_demo"):
        return "boilerplate"
    text = unit.text or ""
    if unit.kind == "tool_result":
        return "tool_output" if text.startswith("Async agent launched successfully") else None
    if unit.kind != "text" or unit.role not in ("user", "system"):
        return None
    if is_project_instructions(text):
        return "constraint"
    if unit.role == "system":
        if _HARNESS_NOTE.match(text):
            return "boilerplate"
        return "error" if _CLIENT_EXCEPTION.match(text) else None
    if is_skill_expansion(text):
        return expansion_category(text)
    if len(text) <= 400 and _yes_no_prompt(text):
        return "acknowledgment"
    return None


# An assistant's text or thinking is never requirement or constraint: the user and the project
# set those, and an assistant restating them is status (TAXONOMY.md's boundary rules). None of
# the hand labels' 1,998 assistant texts and 1,268 thinking blocks is either (test_labeling's
# check), while the shipped model gave 150 of minsky's unlabelled Cursor replies one of the
# two, in sample. A tool call may carry them: a sub-agent's brief quoting the user (4 labels).
_NOT_THE_ASSISTANTS = frozenset({"requirement", "constraint"})


def excluded_categories(unit: Unit) -> frozenset[str]:
    """The categories TAXONOMY.md rules out for a unit whatever a model says (see above)."""
    if unit.role == "assistant" and unit.kind in ("text", "thinking"):
        return _NOT_THE_ASSISTANTS
    return frozenset()


class Settler:
    """`settled_category` over units fed in session order, remembering the calls: the result
    of a call that read a skill or rule file (`reads_rules_file`) is constraint."""

    def __init__(self) -> None:
        self._rules_calls: set[tuple[str, str]] = set()

    def __call__(self, unit: Unit) -> str | None:
        settled = settled_category(unit)
        if unit.call_id:
            key = (unit.session_id, unit.call_id)
            if unit.kind == "tool_call" and reads_rules_file(unit):
                self._rules_calls.add(key)
            elif settled is None and unit.kind == "tool_result" and not unit.is_error:
                if key in self._rules_calls:
                    return "constraint"
        return settled


def is_bash_input(text: str) -> bool:
    """A `<bash-input>` echo of a shell command the user ran inside the client."""
    return _BASH_INPUT.match(text) is not None


def is_task_notification(text: str) -> bool:
    """A background task's completion notice."""
    return _TASK_NOTIFICATION.match(text) is not None


def is_compact_summary(text: str) -> bool:
    """A context summary injected after a compaction (carries the task forward)."""
    return _COMPACT_SUMMARY.search(text[:500]) is not None


def is_compact_request(text: str) -> bool:
    """The instruction that asks a model to write a compaction summary."""
    return _COMPACT_REQUEST.search(text[:4000]) is not None


def is_skill_expansion(text: str) -> bool:
    """The instruction text a slash command or skill expands into."""
    return _SKILL_EXPANSION.match(text) is not None


def skill_arguments(text: str) -> str | None:
    """What a command or skill expansion was given to work on: a `<command-message>` command's
    own text, or the non-empty `ARGUMENTS:` line Claude Code appends to a skill; None for a
    skill launched bare (only its rules)."""
    if text.lstrip().startswith("<command-message>"):
        return text
    at = text.rfind("\nARGUMENTS:")
    args = text[at + 11 :].strip() if at >= 0 else ""
    return args or None


def expansion_category(text: str) -> str:
    """A skill or command expansion's category: requirement when it carries the task
    (`skill_arguments`), else constraint: only the skill's rules (the hand-label conventions)."""
    return "requirement" if skill_arguments(text) is not None else "constraint"


# --- tools -----------------------------------------------------------------------------------

_TOOL_CLASSES: dict[str, frozenset[str]] = {
    "read": frozenset({"read", "read_file", "view", "open", "cat", "notebookread", "read_many_files", "goto", "scroll_down", "scroll_up"}),
    "search": frozenset({"grep", "glob", "ls", "list_directory", "search_file_content", "find_file", "search_dir", "search_file", "rg", "find", "codebase_search", "file_search", "list_files", "list_dir", "grep_search"}),
    "edit": frozenset({"edit", "write", "multiedit", "write_file", "replace", "create", "str_replace_editor", "str_replace", "apply_patch", "notebookedit", "insert", "edit_file", "create_file"}),
    "plan": frozenset({"todowrite", "update_plan", "taskcreate", "exitplanmode", "write_todos", "todo_write", "think"}),
    "shell": frozenset({"bash", "powershell", "exec_command", "shell", "run_shell_command", "execute_bash", "run", "run_ipython", "local_shell", "write_stdin", "read_bash", "stop_bash", "bashoutput", "killshell", "taskoutput", "run_terminal_cmd", "terminal"}),
    "web": frozenset({"webfetch", "websearch", "web_fetch", "google_web_search", "fetch", "browser"}),
    "task": frozenset({"task", "agent", "skill", "taskupdate", "tasklist", "toolsearch", "report_intent"}),
    "ask": frozenset({"askuserquestion", "ask_user", "request_user_input"}),
    "finish": frozenset({"submit", "finish", "attempt_completion"}),
}  # fmt: skip
_TOOL_CLASS = {name: cls for cls, names in _TOOL_CLASSES.items() for name in names}


def tool_class(tool_name: str | None) -> str | None:
    """What a tool does: read, search, edit, plan, shell, web, task, ask, finish (None if unknown)."""
    if not tool_name:
        return None
    name = tool_name.lower()
    if name.startswith("mcp__"):
        name = name.rsplit("__", 1)[-1]
    return _TOOL_CLASS.get(name)


_SHELL_WRITE = re.compile(
    r"apply_patch|\*\*\* Begin Patch|\bsed -i|(?:^|[|;&]\s*)tee\b|(?<![<>2&])>(?!&)\s*[\w./~-]+\.\w+|"
    r"Set-Content|Out-File|Add-Content|\bpatch -p|"
    r"\b(?:edit_file_by_replace|create_file|append_file|insert_content_at_line)\(",
    _I,
)
_SHELL_READ = re.compile(
    r"^\W*(?:cd \S+\s*&&\s*)?(?:ls|cat|head|tail|less|grep|rg|ag|find|fd|tree|wc|pwd|stat|file|which|"
    r"sed -n|awk|nl|git (?:status|log|diff|show|branch|blame|grep|ls-files|remote|rev-parse)|gh (?:pr|issue) view|"
    r"Get-Content|Get-ChildItem|Select-String|type|dir|echo)\b",
    _I,
)
_SHELL_CAT = re.compile(
    r"^\W*(?:cd \S+\s*&&\s*)?(?:cat|head|tail|sed -n|nl|less|Get-Content|type|bat)\b(?![^|]*\|\s*(?:grep|rg|wc))",
    _I,
)
_SHELL_TEST = re.compile(
    r"\b(?:pytest|tox|nox|go test|go build|go vet|cargo (?:test|build|check|clippy)|npm (?:run )?(?:test|build|lint)|"
    r"pnpm|yarn (?:test|build)|bun test|jest|vitest|mocha|make (?:test|check|lint)|mise run|ruff|mypy|eslint|"
    r"tsc|golangci-lint|unittest|rspec|gradle|mvn)\b",
    _I,
)


def shell_command_kind(command: str) -> str:
    """'write' (edits files), 'read' (only looks), 'test' (build/test/lint) or 'other'."""
    if _SHELL_WRITE.search(command):
        return "write"
    if _SHELL_TEST.search(command):
        return "test"
    if _SHELL_READ.match(command):
        return "read"
    return "other"


def shell_reads_file(command: str) -> bool:
    """A shell command that prints a file (cat, head, sed -n, Get-Content), not one that filters it."""
    return _SHELL_CAT.match(command) is not None


def tool_input(u: Unit) -> dict[str, Any]:
    """A tool call's input as a dict (readers render it as compact JSON); {} when it is not JSON."""
    try:
        v = json.loads(u.text)
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested too deeply
        return {}
    if isinstance(v, dict) and isinstance(v.get("arguments"), str):  # some formats nest JSON
        try:
            inner = json.loads(v["arguments"])
            return inner if isinstance(inner, dict) else v
        except (ValueError, RecursionError):
            return v
    return v if isinstance(v, dict) else {}


def shell_command(u: Unit) -> str:
    """The command line of a shell tool call (any field name the formats use)."""
    d = tool_input(u)
    for k in ("command", "cmd", "script", "code", "input", "chars"):
        v = d.get(k)
        if isinstance(v, str):
            return v
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return " ".join(v)
    return u.text


_PATH_KEYS = ("file_path", "path", "target_file", "filename", "absolute_path")
_RULES_MARKS = ("SKILL.md", "AGENTS.md", "CLAUDE.md", "GEMINI.md", ".mdc", ".claude", ".cursor")
# A skill, command or rule file: SKILL.md, AGENTS.md / CLAUDE.md / GEMINI.md, a Cursor rule.
_RULES_FILE = re.compile(
    r"(?:^|[/\\\s'\"])(?:SKILL|AGENTS|CLAUDE|GEMINI)\.md\b|\.mdc\b|"
    r"[/\\]\.claude[/\\](?:skills|commands|agents)[/\\]|\.cursor[/\\]rules[/\\]"
)


def reads_rules_file(call: Unit) -> bool:
    """A call that reads a skill, command or rule file (a Read of SKILL.md, `sed -n` of
    AGENTS.md, `cat` of a Cursor rule, Cursor's `fetch_rules`): its result is the rules the
    agent will follow, constraint by the hand-label conventions."""
    if call.kind != "tool_call":
        return False
    name = (call.tool_name or "").lower()
    if name == "fetch_rules":
        return True
    if not any(mark in call.text for mark in _RULES_MARKS):  # cheap: most calls name none
        return False
    cls = tool_class(name)
    if cls == "read":
        args = tool_input(call)
        path = next((v for k in _PATH_KEYS if isinstance(v := args.get(k), str)), "")
        return _RULES_FILE.search(path) is not None
    if cls == "shell":
        command = shell_command(call)
        return shell_reads_file(command) and _RULES_FILE.search(command) is not None
    return False


# Boolean cues over a text, in a fixed order: the classifier's hand features.
CUE_FUNCTIONS: dict[str, Callable[[str], bool]] = {
    "has_code": has_code,
    "has_diff": has_diff,
    "has_error_signal": has_error_signal,
    "has_test_pass": has_test_pass,
    "has_test_failure": has_test_failure,
    "has_path": has_path,
    "has_url": has_url,
    "has_requirement_words": has_requirement_words,
    "has_constraint_words": has_constraint_words,
    "has_decision_words": has_decision_words,
    "has_architecture_words": has_architecture_words,
    "has_weighing_words": has_weighing_words,
    "is_question": is_question,
    "starts_with_request": starts_with_request,
    "is_acknowledgment": is_acknowledgment,
    "is_announcement": is_announcement,
    "is_bare_done": is_bare_done,
    "has_summary_words": has_summary_words,
    "is_greeting": is_greeting,
    "is_boilerplate_marker": is_boilerplate_marker,
    "is_project_instructions": is_project_instructions,
    "is_client_noise": is_client_noise,
    "is_file_view": is_file_view,
    "is_placeholder": is_placeholder,
    "is_bash_input": is_bash_input,
    "is_task_notification": is_task_notification,
    "is_compact_summary": is_compact_summary,
    "is_compact_request": is_compact_request,
    "is_skill_expansion": is_skill_expansion,
}


def cue_vector(text: str) -> list[bool]:
    """All boolean cues of a text, in `CUE_FUNCTIONS` order."""
    return [f(text) for f in CUE_FUNCTIONS.values()]
