"""Idle compaction, end to end on loopback: a real Claude Code session idles past T_trigger.

    .venv/bin/python scripts/demo_idle_session.py [SESSION.jsonl]

Scenario 1: the last turn ends, the user goes to lunch; at TTL - safety (266 s on a virtual
clock) the compactor sends the live conversation plus the instruction (reading the warm
cache), splices in the summary, and the resume request is a fraction of the size.
Scenario 2: the same, but the user types while the summary is streaming: the compaction is
aborted mid-stream and the user's turn goes out against the original history, unchanged.
Scenario 3: the fault table: server error, timeout, reset, truncated stream, max_tokens,
missing sections, user input mid-stream; what the audit says and what became of the history.

The LLM is tests/llm_server.py: a real HTTP server speaking the Anthropic Messages API with
scripted answers; its usage figures simulate a prefix cache at 4 bytes a token. Its summary is
written by hand for the bundled session; for any other session it is built from that session's
own units (see `session_summary`), never the bundled session's.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path

import anthropic
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from llm_server import LLMServer, Reply  # noqa: E402

from winnow.runtime.archive import AuditLog, read_audit  # noqa: E402
from winnow.runtime.economics import estimate  # noqa: E402
from winnow.runtime.idle import INSTRUCTION, IdleCompactor, IdleConfig, VirtualClock  # noqa: E402
from winnow.runtime.llm import Conversation  # noqa: E402
from winnow.runtime.session import Session  # noqa: E402
from winnow.serving.tokens import default_token_counter  # noqa: E402

SESSION = ROOT / "tests" / "fixtures" / "demo_session.jsonl"
# What a model wrote for the bundled session (SESSION), in the instruction's sections.
DEMO_SUMMARY = """## Goal
Add a 0.4.4 entry (changes since v0.4.3) to CHANGELOG.md of entireio/cli.
## Completed changes
- CHANGELOG.md: new `## [0.4.4] - 2026-02-13` section above 0.4.3 (Added / Changed / Fixed), PR links.
## Active working files
- /Users/dev/Work/entire/devenv/cli/CHANGELOG.md lines 1-40 (the new section sits at the top).
## Ruled-out dead ends
- `git log --first-parent` / ancestry-path greps did not show the PR of 966e0df2; the merge of its branch did.
## Unresolved failures
- none
## Pending todos
- tag the release once the user confirms.
## Next immediate step
Wait for the user's go to tag v0.4.4."""
TOOLS = [
    {"name": n, "description": d, "input_schema": {"type": "object", "properties": {}}}
    for n, d in (
        ("Bash", "Run a shell command"),
        ("Read", "Read a file"),
        ("Edit", "Edit a file"),
        ("Glob", "Find files"),
    )
]
SYSTEM = [
    {
        "type": "text",
        "text": "You are Claude Code, Anthropic's CLI for coding.",
        "cache_control": {"type": "ephemeral"},
    }
]


def session_summary(path: Path) -> str:
    """The scripted model's summary of the session in `path`, in the instruction's sections.

    The bundled session has one written by hand; any other gets one built from its own units,
    labelled by the shipped classifier: the first requirement, the files its tools edited and
    read, its last decisions, its last error and its last assistant text.
    """
    if path.resolve() == SESSION.resolve():
        return DEMO_SUMMARY
    from winnow.data.readers import read_paths
    from winnow.serving import ImportanceClassifier

    units = list(read_paths([path]))
    cats = [p.category for p in ImportanceClassifier.load().predict(units)]

    def first_line(text: str, n: int = 160) -> str:
        return " ".join(text.strip().splitlines()[0].split())[:n] if text.strip() else ""

    def paths(tools: tuple[str, ...]) -> list[str]:
        out: dict[str, None] = {}
        for u in units:
            if u.kind == "tool_call" and u.tool_name in tools:
                try:
                    args = json.loads(u.text)
                except ValueError:
                    continue
                p = args.get("file_path") or args.get("path") if isinstance(args, dict) else None
                if isinstance(p, str):
                    out[p] = None
        return list(out)

    by = {c: [u for u, uc in zip(units, cats) if uc == c] for c in set(cats)}
    said = [u for u in units if u.role == "assistant" and u.kind == "text" and u.text.strip()]
    edited = paths(("Edit", "MultiEdit", "Write", "NotebookEdit"))
    read = [p for p in paths(("Read",)) if p not in edited]
    sections = {
        "Goal": [first_line(u.text, 300) for u in by.get("requirement", [])[:1]],
        "Completed changes": [f"- edited {p}" for p in edited]
        + [f"- decided: {first_line(u.text)}" for u in by.get("decision", [])[-5:]],
        "Active working files": [f"- {p}" for p in (edited + read)[-8:]],
        "Ruled-out dead ends": [],
        "Unresolved failures": [first_line(u.text) for u in by.get("error", [])[-1:]],
        "Pending todos": [],
        "Next immediate step": [first_line(u.text) for u in said[-1:]],
    }
    return "\n".join(
        f"## {name}\n" + ("\n".join(lines) if lines else "- none recorded")
        for name, lines in sections.items()
    )


def claude_code_messages(path: Path) -> list[dict]:
    """Anthropic messages from a Claude Code JSONL: one message per assistant id, same roles merged."""
    messages: list[dict] = []
    seen_ids: dict[str, dict] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rec = json.loads(line)
        except ValueError as e:  # bad input: one line, and the good records around it kept
            print(f"{path}:{lineno}: invalid JSON ({e.msg}), line skipped", file=sys.stderr)
            continue
        if (
            not isinstance(rec, dict)
            or rec.get("type") not in ("user", "assistant")
            or rec.get("isSidechain")
            or rec.get("isMeta")
        ):
            continue
        msg = rec["message"]
        content = msg["content"]
        if isinstance(content, str):
            if content.startswith(("<local-command", "<command-name>")):
                continue  # housekeeping wrappers the agent never saw
            content = [{"type": "text", "text": content}]
        if msg["role"] == "assistant" and msg.get("id") in seen_ids:
            seen_ids[msg["id"]]["content"].extend(content)
            continue
        if messages and messages[-1]["role"] == msg["role"]:
            messages[-1]["content"].extend(content)
        else:
            messages.append({"role": msg["role"], "content": list(content)})
        if msg["role"] == "assistant":
            seen_ids[msg.get("id", "")] = messages[-1]
    # the harness marks the end of the history for caching, as Claude Code does
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return messages


def scripted(summary: str, summary_delay: float, fault: Reply | None = None):
    def reply(rec):
        last = rec.body["messages"][-1]["content"]
        if isinstance(last, str) and last.startswith(INSTRUCTION[:30]):
            return fault or Reply(summary, chunk_chars=6, chunk_delay=summary_delay)
        return Reply("Sure. Tagging v0.4.4 now." if len(rec.body["messages"]) < 10 else "Noted.")

    return reply


def build(srv: LLMServer, runs: Path, clock: VirtualClock, session_file: Path, timeout=30.0):
    conv = Conversation(
        "anthropic", "claude-sonnet-4-5", claude_code_messages(session_file), SYSTEM, TOOLS
    )
    client = anthropic.AsyncAnthropic(
        base_url=srv.base_url, api_key="demo", timeout=timeout, max_retries=0
    )
    # a small real session (about 8K tokens), so the minimum context is lowered from 40K
    config = IdleConfig(
        min_context_tokens=5_000,
        min_new_tokens=2_000,
        summary_tokens=600,
        keep_turns=1,
        resume_probability=0.8,
    )
    compactor = IdleCompactor(
        conv,
        client,
        config,
        clock=clock,
        classifier="default",
        audit=AuditLog(runs, "demo", clock.now),
    )
    return conv, client, compactor, Session(conv, client, compactor=compactor)


def usage_tokens(usage: dict) -> int:
    return sum(
        usage.get(k) or 0
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )


async def scenario_compact(console: Console, runs: Path, session_file: Path, summary: str) -> None:
    console.rule("[bold]1. idle past T_trigger: compact, then resume")
    counter = default_token_counter()
    clock = VirtualClock()
    with LLMServer(replies=scripted(summary, 0.0)) as srv:
        conv, client, compactor, session = build(srv, runs, clock, session_file)
        first = await session.send(
            "Looks good. I'm off to lunch; when I'm back we tag the release."
        )
        console.print(
            f"turn ended: context {compactor.context_tokens:,} tokens; {compactor.last_decision}"
        )
        uncompacted = conv.encode([{"role": "user", "content": "Back. Tag v0.4.4 now."}])
        clock.advance(compactor.trigger_after)
        await compactor.wait()
        console.print(
            f"t+{compactor.trigger_after:.0f} s: state {compactor.state}; messages now {len(conv.messages)}"
        )
        clock.advance(3600)  # lunch: the cache would have expired anyway
        done = await session.send("Back. Tag v0.4.4 now.")
        await client.close()
        live, compaction, resume = srv.requests
    compaction_usage = read_audit(runs / "demo.audit.jsonl")[-1]["compaction_usage"]
    t = Table(
        title="requests (tokens: cl100k count of the body; billed: the server's usage, 4 bytes a token)"
    )
    for col in ("request", "bytes", "tokens", "billed input", "of which cache read"):
        t.add_column(col, justify="left" if col == "request" else "right")
    rows = (
        ("last live turn", live.raw, first.usage),
        ("compaction (live + instruction)", compaction.raw, compaction_usage),
        ("resume after lunch, compacted", resume.raw, done.usage),
        ("resume without compaction", uncompacted, None),
    )
    for label, raw, u in rows:
        t.add_row(
            label, f"{len(raw):,}", f"{counter.count(raw.decode()):,}",
            f"{usage_tokens(u):,}" if u else "-", f"{u.get('cache_read_input_tokens', 0):,}" if u else "-",
        )  # fmt: skip
    console.print(t)
    prefix_same = compaction.raw.startswith(live.raw[:-2])
    console.print(
        f"compaction request starts with the live request's bytes: [bold]{prefix_same}[/]"
    )
    before, after = counter.count(uncompacted.decode()), counter.count(resume.raw.decode())
    est = estimate(before, after, counter.count(summary), compactor.profile)
    console.print(
        f"resume request: {len(uncompacted):,} -> {len(resume.raw):,} bytes, {before:,} -> {after:,} tokens "
        f"({after / before:.0%}); on {compactor.profile.name} the break-even resume probability is "
        f"{est.break_even:.0%}"
    )
    print_audit(console, runs / "demo.audit.jsonl")
    block = conv.messages[0]["content"]
    console.print("[bold]summary block (head):[/]")
    console.print(
        block[:1400] + ("\n..." if len(block) > 1400 else ""), markup=False, highlight=False
    )


async def scenario_interrupt(
    console: Console, runs: Path, session_file: Path, summary: str
) -> None:
    console.rule("[bold]2. the user types while the summary streams: abort, nothing changes")
    clock = VirtualClock()
    with LLMServer(replies=scripted(summary, 0.01)) as srv:
        conv, client, compactor, session = build(srv, runs, clock, session_file)
        await session.send("Looks good. Give me a minute.")
        original = json.dumps(conv.messages)
        clock.advance(compactor.trigger_after)
        await asyncio.to_thread(srv.wait_for, lambda rs: len(rs) == 2 and rs[1].chunks_sent >= 5)
        console.print(
            f"t+{compactor.trigger_after:.0f} s: compaction streaming ({srv.requests[1].chunks_sent} chunks)"
        )
        await session.send("Actually, add the PR link for #236 too.")
        await asyncio.to_thread(srv.wait_aborted)
        await client.close()
        compaction, user_turn = srv.requests[1], srv.requests[2]
    console.print(
        f"compaction aborted mid-stream: {compaction.aborted} after {compaction.chunks_sent} chunks of "
        f"{-(-len(summary) // 6)}; after the user's turn the compactor is {compactor.state} again"
    )
    console.print(
        "user turn sent against the original history, unchanged: "
        f"[bold]{json.dumps(user_turn.body['messages'][:-1]) == original}[/]; "
        f"history now {len(conv.messages)} messages (original + user + answer)"
    )
    print_audit(console, runs / "demo.audit.jsonl", last=1)


def faults(summary: str) -> dict[str, tuple[Reply, float]]:
    """fault -> the compaction request's reply, the client's timeout."""
    return {
        "server error (HTTP 529)": (Reply("overloaded", status=529), 30.0),
        "timeout (server stalls 5 s, client timeout 1 s)": (Reply(summary, stall_s=5.0), 1.0),
        "connection reset after 3 deltas": (Reply(summary, chunk_chars=40, reset_after=3), 30.0),
        "truncated stream (clean close after 3 deltas)": (
            Reply(summary, chunk_chars=40, cut_after=3),
            30.0,
        ),
        "stop_reason max_tokens": (Reply(summary[:300], stop_reason="max_tokens"), 30.0),
        "sections missing": (Reply(summary.split("## Pending")[0]), 30.0),
        "user input mid-stream": (Reply(summary, chunk_chars=6, chunk_delay=0.01), 30.0),
        "none (a whole summary)": (Reply(summary), 30.0),
    }


async def fault_row(runs: Path, session_file: Path, summary: str, fault: str) -> list[str]:
    reply, timeout = faults(summary)[fault]
    clock = VirtualClock()
    with LLMServer(replies=scripted(summary, 0.0, reply)) as srv:
        conv, client, compactor, session = build(srv, runs, clock, session_file, timeout)
        await session.send("Looks good. Give me a minute.")
        before = json.dumps(conv.messages)
        clock.advance(compactor.trigger_after)
        if fault.startswith("user input"):
            await asyncio.to_thread(srv.wait_for, lambda rs: len(rs) == 2 and rs[1].chunks_sent)
            await session.send("Actually, add the PR link for #236 too.")
            history = json.dumps(conv.messages[:-2]) == before and "unchanged, then the turn"
        else:
            await compactor.wait()
            history = "unchanged" if json.dumps(conv.messages) == before else "compacted"
            history += f" ({len(json.loads(before))} -> {len(conv.messages)} messages)"
            await session.send("Back. Tag v0.4.4 now.")  # the session goes on
        compactor.preempt("demo_end")  # the timer the last turn armed
        await client.close()
    entry = read_audit(runs / "demo.audit.jsonl")[-1]
    reason = str(entry.get("reason") or entry.get("trigger", ""))
    return [fault, entry["event"], re.sub(r" from http\S+:", ":", reason)[:70], str(history)]


async def scenario_faults(console: Console, runs: Path, session_file: Path, summary: str) -> None:
    console.rule("[bold]3. faults: a summary is applied only when it is whole")
    t = Table(title="idle compaction under faults (official anthropic SDK client, loopback)")
    for col in ("fault", "audit event", "reason", "history"):
        t.add_column(col)
    for i, fault in enumerate(faults(summary)):
        t.add_row(*await fault_row(runs / str(i), session_file, summary, fault))
    console.print(t)


def print_audit(console: Console, path: Path, last: int | None = None) -> None:
    entries = read_audit(path)[-last:] if last else read_audit(path)
    t = Table(title=f"audit log {path.name}")
    for col in (
        "time (virtual)",
        "event",
        "trigger",
        "tokens before",
        "after",
        "est. cache hit",
        "cache hit",
        "archive",
    ):
        t.add_column(col)
    for e in entries:
        t.add_row(
            f"+{e['time'] - VirtualClock().now():.0f} s", e["event"], e.get("trigger", ""),
            f"{e.get('tokens_before', 0):,}", f"{e['tokens_after']:,}" if "tokens_after" in e else "",
            f"{e['estimated_cache_hit']:.1%}" if "estimated_cache_hit" in e else "",
            f"{e['cache_hit']:.1%}" if e.get("cache_hit") is not None else "", Path(e.get("archive", "")).name,
        )  # fmt: skip
    console.print(t)


def main() -> int:
    session_file = Path(sys.argv[1]) if len(sys.argv) > 1 else SESSION
    if not session_file.is_file():
        print(f"demo_idle_session: no such file: {session_file}", file=sys.stderr)
        return 1
    console = Console(width=max(Console().width, 120))
    with tempfile.TemporaryDirectory() as tmp:
        summary = session_summary(session_file)
        asyncio.run(scenario_compact(console, Path(tmp) / "1", session_file, summary))
        asyncio.run(scenario_interrupt(console, Path(tmp) / "2", session_file, summary))
        asyncio.run(scenario_faults(console, Path(tmp) / "3", session_file, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
