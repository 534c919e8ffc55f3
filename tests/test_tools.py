"""Canonical tool verbs and result shapes: the same job reads the same in every agent format."""

from __future__ import annotations

import json

import pytest

from winnow.classifier.tools import VERBS, command_verb, name_verb, result_shape, tool_verb


def call(**args) -> str:
    return json.dumps(args)


@pytest.mark.parametrize(
    "name,text,verb",
    [
        # reading a file, in seven agents' words
        ("Read", call(file_path="/a/b.py"), "read"),
        ("read_file", call(target_file="src/x.ts"), "read"),
        ("view", call(path="/repo/x.json"), "read"),
        ("str_replace_editor", call(command="view", path="/w/x.c"), "read"),
        ("exec_command", call(cmd="sed -n '1,200p' src/cli.ts", workdir="/r"), "read"),
        ("Bash", call(command="cat README.md", description="Show it"), "read"),
        ("run_ipython", call(code="open_file('/workspace/src/App.tsx')"), "read"),
        ("open", call(command="open chall.py"), "read"),
        # running a shell command
        ("run_terminal_cmd", call(command="minsky tasks list --json"), "run"),
        ("execute_bash", call(command="cd /w/ponyc && ./build.sh"), "run"),
        ("python", call(command="python reproduce.py"), "run"),
        ("run_shell_command", call(command="echo hi", description="x"), "run"),
        # searching and listing
        ("exec_command", call(cmd='rg -n "checkpoint" apps docs'), "search"),
        ("Grep", call(pattern="foo", path="/x"), "search"),
        ("codebase_search", call(query="session workflow rule"), "search"),
        ("find_file", call(command='find_file "numpy_handler.py"'), "search"),
        ("execute_bash", call(command="cd /w && ls -l"), "list"),
        ("list_dir", call(path="src/domain"), "list"),
        # editing and writing
        ("apply_patch", "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n", "edit"),
        ("apply_patch", "*** Begin Patch\n*** Add File: b.md\n+hello\n", "write"),
        ("str_replace_editor", call(command="str_replace", path="/a", old_str="x"), "edit"),
        ("str_replace_editor", call(command="create", path="/a", file_text="x"), "write"),
        ("run_ipython", call(code="edit_file_by_replace('/a.tsx', to_replace='x')"), "edit"),
        ("Edit", call(file_path="/a.go", old_string="a", new_string="b"), "edit"),
        ("edit_file", call(code_edit="```diff\n+x\n```"), "edit"),
        ("write_file", call(file_path="t.txt", content="hello"), "write"),
        ("Bash", call(command="sed -i 's/a/b/' x.py"), "edit"),
        # tests, version control, plans, tasks, the web, questions
        ("Bash", call(command="rtk git status"), "vcs"),
        ("exec_command", call(cmd="git -C /r diff --stat"), "vcs"),
        ("PowerShell", call(command="cd D:\\omp\\src; go test ./..."), "test"),
        ("run_terminal_cmd", call(command="bun test src/domain/init.test.ts"), "test"),
        ("Bash", call(command="FOO=1 npm run lint"), "test"),
        ("TodoWrite", call(todos=[{"content": "x"}]), "plan"),
        ("update_plan", call(plan=[{"step": "x"}]), "plan"),
        ("Task", call(prompt="explore"), "task"),
        ("fetch_rules", call(rule_names=["x"]), "task"),
        ("WebFetch", call(url="https://x"), "web"),
        ("AskUserQuestion", call(questions=[]), "ask"),
        ("submit", call(command="submit flag{x}"), "finish"),
        ("mcp__github__search_issues", call(q="x"), "search"),
        ("write_stdin", call(session_id=1, chars=""), "run"),
        ("frobnicate", call(x=1), "other"),
        (None, "", "none"),
    ],
)
def test_verbs_agree_across_formats(name, text, verb):
    assert verb in VERBS
    assert tool_verb(name, text) == verb


def test_a_result_alone_knows_only_its_tool_name():
    assert tool_verb("Read") == "read"
    assert tool_verb("exec_command") == "run"  # without the call, a shell is just a run
    assert name_verb("exec_command") == "shell"


@pytest.mark.parametrize(
    "command,verb",
    [
        ("sudo timeout 60 pytest -x tests", "test"),
        ("/usr/bin/git log --oneline", "vcs"),
        ("cd a && cd b && head -20 x", "read"),
        ("", "run"),
        ("npx -y markdownlint-cli2 '**/*.md'", "test"),
        ("go run ./cmd", "run"),
        ("./rock", "run"),
    ],
)
def test_command_verb(command, verb):
    assert command_verb(command) == verb


@pytest.mark.parametrize(
    "text,exit,kind,body_start",
    [
        (  # Codex
            "Chunk ID: 9b46de\nWall time: 0.0001 seconds\nProcess exited with code 0\n"
            'Original token count: 11\nOutput:\n{\n  "enabled": true\n}\n',
            "ok",
            "text",
            "{",
        ),
        (
            "Chunk ID: 14456e\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
            "Original token count: 0\nOutput:\n",
            "ok",
            "empty",
            "",
        ),
        (
            "Chunk ID: fd6e7e\nWall time: 0.0000 seconds\nProcess exited with code 128\n"
            "Original token count: 8\nOutput:\nfatal: Needed a single revision\n",
            "fail",
            "text",
            "fatal",
        ),
        ("Exit code 1\nFAILED tests/test_a.py::test_b", "fail", "text", "FAILED"),  # Claude Code
        ("(Bash completed with no output)", None, "empty", "("),
        (  # Copilot
            "a.py\nb/c.py\nd/e.ts\n<shellId: 3 completed with exit code 0>",
            "ok",
            "listing",
            "a.py",
        ),
        (  # OpenHands
            "total 8\nx\n[The command completed with exit code 2.]",
            "fail",
            "text",
            "total",
        ),
        ('     1\tpackage main\n     2\t\n     3\timport "fmt"\n', None, "numbered", " "),
        ("src/a.py:12:def f():\nsrc/b.py:40:    f()\n", None, "hits", "src"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", None, "diff", "diff"),
        ("", None, "empty", ""),
    ],
)
def test_result_shape(text, exit, kind, body_start):
    shape = result_shape(text)
    assert (shape.exit, shape.kind) == (exit, kind)
    assert shape.body.startswith(body_start)
    assert "Chunk ID" not in shape.body and "shellId" not in shape.body


def test_result_shape_is_linear_on_hostile_text():
    """Header and trailer rules look at a bounded prefix and suffix only."""
    import time

    for text in ("Chunk ID: " + "a" * 1_000_000, "Command: " + "x" * 1_000_000, "\n" * 1_000_000):
        t0 = time.perf_counter()
        result_shape(text)
        assert time.perf_counter() - t0 < 0.5
