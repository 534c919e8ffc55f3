"""What a tool call does and what its result shows, in the same terms for every agent format.

The same job has a different tool name in every agent (`Bash`, `exec_command`, `shell`,
`run_terminal_cmd`, `execute_bash`; `Read`, `read_file`, `view`, `str_replace_editor view`,
`sed -n 1,80p`), and results come wrapped in each harness's own header (Codex's `Chunk ID ...
Process exited with code 0 ... Output:`, Copilot's `<shellId: 3 completed with exit code 0>`,
Gemini's `Command: ... Exit Code: ...`). A classifier that learns the names and the headers
learns the agent, not the job: it does not transfer to an agent it never saw. Here both are
mapped to one vocabulary:

- `tool_verb(name, text)`: a call's canonical verb (`VERBS`) from its tool name and, for
  shell-like tools, from its command line (`cat x` reads, `rg x` searches, `pytest` tests);
- `result_shape(text)`: a result's exit status parsed from the text, its body without the
  harness's header and trailer, and the body's shape (empty, numbered file content, a listing,
  search hits).

Every table is here, in one place; numpy-free, and every rule is a bounded prefix or suffix
test (linear in the text, at most a few hundred characters looked at).
"""

from __future__ import annotations

import re
from typing import NamedTuple

VERBS = (
    "none", "read", "search", "list", "edit", "write", "run", "test", "vcs", "plan", "task",
    "web", "ask", "finish", "other",
)  # fmt: skip

# Tool name (lower-cased, an MCP server prefix cut) -> verb; "shell" means: look at the command.
_SHELL = "shell"
_NAMES: dict[str, str] = {
    name: verb
    for verb, names in {
        "read": "read read_file view open cat notebookread read_many_files goto scroll_down "
        "scroll_up open_file get_file_contents",
        "search": "grep glob search_file_content find_file search_dir search_file rg "
        "codebase_search file_search grep_search tool_search toolsearch search",
        "list": "ls list_directory list_files list_dir tree",
        "edit": "edit multiedit replace str_replace apply_patch notebookedit insert edit_file "
        "search_replace",
        "write": "write write_file create create_file",
        "plan": "todowrite update_plan taskcreate exitplanmode write_todos todo_write think",
        "task": "task agent skill taskupdate tasklist taskget report_intent spawn_task "
        "dismiss_task fetch_rules",
        "web": "webfetch websearch web_fetch web_search google_web_search fetch browser",
        "ask": "askuserquestion ask_user request_user_input ask_followup_question",
        "finish": "submit finish attempt_completion",
        "run": "write_stdin read_bash stop_bash bashoutput killshell taskoutput",
        _SHELL: "bash powershell exec_command shell run_shell_command execute_bash run "
        "run_terminal_cmd terminal local_shell run_command",
    }.items()
    for name in names.split()
}
# A command's first word (basename, lower-cased) -> verb.
_COMMANDS: dict[str, str] = {
    word: verb
    for verb, words in {
        "read": "cat head tail less more bat nl get-content gc type open view xxd hexdump od "
        "strings jq",
        "search": "grep rg ag ack egrep fgrep select-string find_file search_dir search_file sls",
        "list": "ls find fd tree dir get-childitem gci pwd du wc stat file which where",
        "edit": "apply_patch patch edit",
        "write": "create touch mkdir tee",
        "test": "pytest tox nox jest vitest mocha rspec tsc mypy ruff eslint biome prettier "
        "golangci-lint markdownlint markdownlint-cli2 make cmake ctest gradle mvn cargo "
        "unittest flake8 pylint black go",
        "vcs": "git gh hg svn",
        "finish": "submit",
    }.items()
    for word in words.split()
}
# `npm test`, `bun test`, `go test` (a test), `sed -n` (a read), `sed -i` (an edit).
_SUBCOMMANDS = {
    ("npm", "test"): "test", ("npm", "run"): "test", ("pnpm", "test"): "test",
    ("pnpm", "run"): "test", ("yarn", "test"): "test", ("bun", "test"): "test",
    ("bun", "run"): "test", ("npx", "tsc"): "test", ("uv", "run"): "run",
    ("python", "-m"): "run", ("sed", "-n"): "read", ("sed", "-i"): "edit",
    ("awk", ""): "read", ("go", "run"): "run",
}  # fmt: skip
# Words that only set up the real command: `cd x &&`, `sudo`, `env A=1`, `timeout 60`, `rtk`.
_PREFIX_WORDS = frozenset("sudo env timeout time nohup rtk npx bunx exec command noglob".split())
# `edit_file_by_replace(`, `open_file(`: OpenHands' IPython helpers.
_PY_HELPERS = {
    "open_file": "read", "goto_line": "read", "scroll_down": "read", "scroll_up": "read",
    "search_dir": "search", "search_file": "search", "find_file": "search",
    "create_file": "write", "edit_file_by_replace": "edit", "insert_content_at_line": "edit",
    "append_file": "edit",
}  # fmt: skip
# str_replace_editor's "command" argument.
_EDITOR_COMMANDS = {"view": "read", "create": "write", "str_replace": "edit", "insert": "edit",
                    "undo_edit": "edit"}  # fmt: skip
_ARG = re.compile(r'"(command|cmd|code|script|chars)"\s*:\s*"((?:[^"\\]|\\.){0,240})')
_HELPER = re.compile(r"\s*(\w+)\(")
_WORD = re.compile(r"[^\s;&|()<>]+")
# Words of a tool name not in the tables (TodoWrite -> todo, write): first rule that hits wins.
_NAME_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_NAME_RULES = (
    ("plan", {"todo", "todos", "plan"}),
    ("edit", {"edit", "replace", "patch", "str"}),
    ("write", {"write", "create", "save"}),
    (_SHELL, {"bash", "shell", "exec", "command", "terminal", "cmd"}),
    ("search", {"grep", "search", "find", "glob", "query"}),
    ("list", {"list", "ls", "dir", "tree"}),
    ("read", {"read", "view", "open", "cat", "get", "show"}),
    ("web", {"web", "fetch", "browse", "url", "http"}),
)
_name_cache: dict[str | None, str | None] = {}


def name_verb(tool_name: str | None) -> str | None:
    """The verb of a tool name alone: a `VERBS` entry, "shell" (the command decides) or None
    (a name no table knows)."""
    if tool_name in _name_cache:
        return _name_cache[tool_name]
    verb: str | None = None
    if tool_name:
        raw = tool_name.rsplit("__", 1)[-1]  # mcp__server__tool -> tool
        low = raw.lower()
        verb = _NAMES.get(low) or _COMMANDS.get(low)
        if verb is None:
            words = {w.lower() for w in _NAME_WORDS.findall(raw)}
            verb = next((v for v, keys in _NAME_RULES if words & keys), None)
    if len(_name_cache) < 4096:
        _name_cache[tool_name] = verb
    return verb


def _unescape(s: str) -> str:
    """The few JSON escapes a command's first words carry."""
    if "\\" not in s:
        return s
    return s.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")


def command_verb(command: str) -> str:
    """The verb of a shell command line: its first real command word (after `cd x &&`,
    `sudo`, `VAR=1`, a path), with `npm test` / `sed -n` style subcommands."""
    words = _WORD.findall(command[:240])
    i = 0
    while i < len(words):
        w = words[i].lower()
        nxt = words[i + 1].lower() if i + 1 < len(words) else ""
        if w in ("cd", "pushd", "set-location") and nxt:
            i += 2  # its argument; `&&` / `;` were cut by _WORD
        elif w in _PREFIX_WORDS or ("=" in w and not w.startswith("=")) or w.isdigit():
            i += 1
        elif w == "-y" or (w.startswith("-") and i > 0 and words[i - 1].lower() in _PREFIX_WORDS):
            i += 1
        else:
            break
    if i >= len(words):
        return "run"
    first = words[i].lower().rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    if first.endswith(".exe"):
        first = first[:-4]
    second = words[i + 1].lower() if i + 1 < len(words) else ""
    sub = _SUBCOMMANDS.get((first, second)) or _SUBCOMMANDS.get((first, ""))
    if sub:
        return sub
    if first == "go" and second not in ("test", "vet", "build"):
        return "run"
    if first == "cargo" and second not in ("test", "build", "check", "clippy"):
        return "run"
    return _COMMANDS.get(first, "run")


def tool_verb(tool_name: str | None, call_text: str = "") -> str:
    """A tool call's canonical verb (`VERBS`), from its name and its arguments (`call_text`,
    the call's JSON or patch text). With no call text (a result alone), shell-like tools are
    "run"."""
    if not tool_name:
        return "none"
    verb = name_verb(tool_name)
    head = call_text[:400]
    if verb == "edit" and tool_name and tool_name.lower() == "str_replace_editor":
        m = _ARG.search(head)
        return _EDITOR_COMMANDS.get(m.group(2), "edit") if m else "edit"
    if head.startswith("*** Begin Patch"):
        return "write" if head.startswith("*** Add File", 16) else "edit"
    if verb not in (_SHELL, None):
        return verb
    m = _ARG.search(head) if head.lstrip().startswith("{") else None
    if m is None:
        return "other" if verb is None else "run"
    arg = _unescape(m.group(2))
    if m.group(1) == "code":  # IPython: a helper call, or plain Python
        h = _HELPER.match(arg)
        return _PY_HELPERS.get(h.group(1), "run") if h else "run"
    if m.group(1) == "chars":  # writing to a running process
        return "run"
    return command_verb(arg)


# --- results ---------------------------------------------------------------------------------


class Shape(NamedTuple):
    """What a tool result shows once its harness wrapping is set aside."""

    exit: str | None  # "ok", "fail" or None (the text states no exit status)
    body: str  # the text without the harness's header and trailer lines
    kind: str  # "empty", "numbered" (file content), "listing", "hits", "diff" or "text"


SHAPES = ("empty", "numbered", "listing", "hits", "diff", "text")
# Header lines of a harness, at the start of a result: the exit code, if any, is group 1.
_HEAD = re.compile(
    r"(?:Chunk ID: \w+\n)?(?:Wall time: [\d.]+ \w+\n)?"
    r"(?:Process exited with code (-?\d+)\n|Process running with session ID \d+\n)?"
    r"(?:Original token count: \d+\n)?Output:\n"  # Codex
    r"|Exit code:? (-?\d+)\n(?:Wall time: [\d.]+ \w+\n)?(?:Output:\n)?"  # Claude Code, Codex
    r"|Command: [^\n]{0,400}\n(?:Directory: [^\n]{0,400}\n)?(?:Stdout|Output): ?"  # Gemini
)
# Trailer lines: Copilot's, OpenHands', Gemini's, SWE-agent's; group 1/2: an exit code.
_TAIL = re.compile(
    r"\n?(?:<shellId: \d+ completed with exit code (-?\d+)>"
    r"|\[The command completed with exit code (-?\d+)\.\]"
    r"|\[Jupyter current working directory: [^\n]{0,300}\]"
    r"|\[Python Interpreter: [^\n]{0,300}\]"
    r"|Process Group PGID: [^\n]{0,40})\s*$"
)
_GEMINI_EXIT = re.compile(r"\nExit Code: (-?\d+|\(none\))")
_NO_OUTPUT = ("(bash completed with no output)", "(no output)", "(empty)", "no output")
_NUMBERED = re.compile(r" *\d+(?:\t|→|\||: |:$)")
_HIT = re.compile(r"[^\s:]{1,200}:\d+[:-]")
_PATHISH = re.compile(r"[^\s]{1,300}$")


def result_shape(text: str) -> Shape:
    """A tool result's exit status, body and shape (see `Shape`)."""
    exit_code: str | None = None
    body = text
    m = _HEAD.match(text[:600])
    if m:
        exit_code = next((g for g in m.groups() if g is not None), None)
        body = text[m.end() :]
    tail = body[-360:]
    t = _TAIL.search(tail)
    if t:
        if exit_code is None:
            exit_code = t.group(1) or t.group(2)
        body = body[: len(body) - len(tail) + t.start()]
    g = _GEMINI_EXIT.search(text[:2000]) if m and text.startswith("Command: ") else None
    if g and exit_code is None and g.group(1).lstrip("-").isdigit():
        exit_code = g.group(1)
    exit = None if exit_code is None else ("ok" if exit_code == "0" else "fail")
    return Shape(exit, body, _body_kind(body))


def _body_kind(body: str) -> str:
    stripped = body.strip()
    if not stripped or stripped.lower() in _NO_OUTPUT:
        return "empty"
    head = stripped[:1200]
    if head.startswith(("diff --git", "--- a/", "*** Begin Patch")) or "\n@@ -" in head:
        return "diff"
    lines = head.split("\n")[:20]
    if len(lines) < 2:
        return "text"
    n = len(lines)
    numbered = sum(1 for ln in lines if _NUMBERED.match(ln))
    if numbered * 2 > n:
        return "numbered"
    hits = sum(1 for ln in lines if _HIT.match(ln))
    if hits * 2 > n:
        return "hits"
    paths = sum(1 for ln in lines if ("/" in ln or "\\" in ln or "." in ln) and _PATHISH.match(ln))
    if paths * 3 > n * 2:
        return "listing"
    return "text"


__all__ = ["SHAPES", "VERBS", "Shape", "command_verb", "name_verb", "result_shape", "tool_verb"]
