"""The real Claude Code CLI through `winnow proxy`, against a scripted stand-in upstream.

`make test` installs the pinned CLI into .cache/ (npm, when it is on the machine);
without it this test skips and says why. The stand-in answers as the Messages API streams and
makes Claude Code call real tools (Bash, Read, Grep where it offers Grep, Edit) on a scratch
project for more than 30 turns, past the proxy's budget.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from proxy_upstream import Turn, Upstream  # noqa: E402

from winnow.serving.proxy import ProxyConfig, ProxyServer  # noqa: E402
from winnow.serving.proxy_audit import read_audit, report  # noqa: E402
from winnow.serving.proxy_state import Rewriter, RewriterConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLAUDE_VERSION = "2.1.332"  # the Makefile installs this one
CLAUDE = ROOT / ".cache" / f"claude-code-{CLAUDE_VERSION}" / "node_modules" / ".bin" / "claude"
BUDGET = 24_000  # Claude Code's tools and system prompt alone are about 12,000 tokens
DONE = "All limiter checks are done."

pytestmark = pytest.mark.slow


def scratch_project(root: Path) -> None:
    """A small service with a rate limiter: big enough files that reading them fills a budget."""
    (root / "app").mkdir()
    (root / "tests").mkdir()
    handlers = "".join(
        f"def handler_{i}(request):\n    '''Endpoint {i}: checks the limiter first.'''\n"
        f"    if not limiter.allow(request.user, cost={i % 3 + 1}):\n"
        f"        return refuse(request, reason='rate limited on endpoint {i}')\n"
        f"    return respond(request, {i})\n\n"
        for i in range(100)
    )
    (root / "app" / "handlers.py").write_text("from app.limits import limiter\n\n" + handlers)
    (root / "app" / "limits.py").write_text(
        "class Limiter:\n    def __init__(self, per_minute=5):\n        self.per_minute = per_minute\n"
        "        self.seen = {}\n\n    def allow(self, user, cost=1):\n"
        "        n = self.seen.get(user, 0) + cost\n        self.seen[user] = n\n"
        "        return n <= self.per_minute\n\n\nlimiter = Limiter()\n"
    )
    (root / "tests" / "test_limits.py").write_text(
        "from app.limits import Limiter\n\n\ndef test_allows_five():\n    lim = Limiter()\n"
        "    assert all(lim.allow('u') for _ in range(5))\n    assert not lim.allow('u')\n"
    )
    (root / "README.md").write_text("# limiter service\n\nMax 5 logins a minute per user.\n")


class Script:
    """The stand-in's side of the session: 32 tool calls over the project, then an answer."""

    def __init__(self, root: Path, steps: int = 32) -> None:
        self.root = root
        self.steps = steps
        self.n = 0
        self.lock = threading.Lock()

    def call(self, n: int, tools: set[str]) -> tuple[str, dict[str, Any]]:
        r = str(self.root)
        grep = (
            ("Grep", {"pattern": f"endpoint {n}", "path": r, "output_mode": "content"})
            if "Grep" in tools
            else ("Bash", {"command": f"grep -rn 'endpoint {n}' {r}/app", "description": "Grep"})
        )
        kinds = [
            ("Read", {"file_path": f"{r}/app/handlers.py"}),
            ("Bash", {"command": f"ls -la {r} {r}/app {r}/tests", "description": "List files"}),
            grep,
            ("Read", {"file_path": f"{r}/app/limits.py"}),
            ("Bash", {"command": f"wc -l {r}/app/*.py && head -c 1500 {r}/app/handlers.py"}),
        ]
        if n == 20:
            return (
                "Edit",
                {
                    "file_path": f"{r}/app/limits.py",
                    "old_string": "per_minute=5",
                    "new_string": "per_minute=5,  # max 5 logins a minute",
                },
            )
        return kinds[n % len(kinds)]

    def __call__(self, rec) -> Turn:
        body = rec.body or {}
        tools = {t.get("name") for t in body.get("tools") or []}
        if "Bash" not in tools:  # not the main agent loop (a side request): answer briefly
            return Turn(text="ok")
        with self.lock:
            n, self.n = self.n, self.n + 1
        if n >= self.steps:
            return Turn(text=DONE, thinking="every check ran")
        name, args = self.call(n, tools)
        return Turn(
            text=f"Step {n}: {name}.",
            tool_calls=[(name, args)],
            thinking=f"step {n}: next I use {name}" if n % 3 == 0 else None,
        )


def test_claude_code_through_the_proxy(tmp_path):
    if not CLAUDE.exists():
        why = "npm is not on this machine" if not shutil.which("npm") else "the install failed"
        pytest.skip(
            f"Claude Code {CLAUDE_VERSION} is not installed in {CLAUDE.parents[2]} ({why}; "
            "`make test` installs it with npm when it can reach the registry)"
        )
    project, home, audit = tmp_path / "project", tmp_path / "home", tmp_path / "audit"
    project.mkdir()
    home.mkdir()
    scratch_project(project)
    script = Script(project)
    with Upstream(script) as up:
        config = ProxyConfig(upstream=up.base_url, port=0, audit_dir=audit)
        with ProxyServer(config, rewriter=Rewriter(RewriterConfig(budget=BUDGET))) as px:
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(home),
                "ANTHROPIC_BASE_URL": px.base_url,
                "ANTHROPIC_API_KEY": "sk-test",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            }
            done = subprocess.run(
                [
                    str(CLAUDE),
                    "-p",
                    "Check how the login rate limiter is used across the project.",
                    "--allowedTools",
                    "Bash,Read,Grep,Edit",
                ],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
    assert done.returncode == 0, done.stderr[-2000:]
    assert DONE in done.stdout
    assert not up.problems()
    main = [r for r in up.messages_requests() if "Bash" in json.dumps(r.body.get("tools"))]
    assert len(main) > 30 and script.n > 30
    # what Claude Code sends, passed on as it came: POST /v1/messages?beta=true, streamed
    assert all(r.query == "beta=true" and r.body["stream"] for r in main)
    assert main[0].headers["x-api-key"] == "sk-test" and "anthropic-beta" in main[0].headers
    results = [
        b for m in main[-1].body["messages"] for b in _blocks(m) if b["type"] == "tool_result"
    ]
    assert any("per_minute" in json.dumps(b) for b in results) or script.n > 30
    assert "# max 5 logins a minute" in (project / "app" / "limits.py").read_text()  # Edit ran
    records = [r for r in read_audit(audit) if r["route"] == "messages"]
    assert len(records) == len(up.messages_requests())
    assert {"compact"} & {r["action"] for r in records} and "reuse" in {
        r["action"] for r in records
    }
    by_req = dict(zip(map(id, up.messages_requests()), records))
    pairs = 0
    for a, b in zip(main, main[1:]):
        ra, rb = by_req[id(a)], by_req[id(b)]
        if rb["action"] != "reuse" or rb["prefix_hash"] != ra.get("prefix_hash"):
            continue
        head = ra["messages_out"] - (ra["messages_in"] - ra["covered"])  # compressed messages
        first_tail = json.dumps(
            a.body["messages"][head], ensure_ascii=False, separators=(",", ":")
        ).encode()
        cut = a.raw.index(first_tail)
        assert b.raw[:cut] == a.raw[:cut]  # byte for byte, request after request
        pairs += 1
    assert pairs >= 5
    totals = report(records)
    assert len(totals) >= 1
    conv = max(totals, key=lambda r: r.requests)
    assert conv.saved > 0.2 and conv.cache_read_share > 0.3


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []
