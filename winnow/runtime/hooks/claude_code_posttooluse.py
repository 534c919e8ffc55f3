#!/usr/bin/env python3
"""Claude Code PostToolUse hook: record how full the context is; ask for a checkpoint past the line.

Install in .claude/settings.json:

    {"hooks": {"PostToolUse": [{"matcher": "*", "hooks": [{"type": "command",
        "command": "python3 /path/to/claude_code_posttooluse.py"}]}]}}

It reads the hook JSON on stdin (transcript_path, cwd), takes the `message.usage` of the
session's latest assistant line, appends a sample to $HARNESS_CTX_LOG (default
<cwd>/.winnow/budget.jsonl) and, when the context crosses $HARNESS_CTX_THRESHOLD percent
(default 40) of $HARNESS_CTX_WINDOW tokens (default 200000), writes <cwd>/.winnow/checkpoint.md
and prints {"decision": "block", "reason": ...}: the form of PostToolUse output Claude Code
shows to the model. It never fails the tool call: on any problem it says one line on stderr
and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

TAIL_BYTES = 1 << 20  # the latest usage is near the end; a huge transcript is not read whole


def latest_usage(transcript: Path) -> dict | None:
    """`message.usage` of the last main-thread assistant line of a Claude Code transcript."""
    with transcript.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - TAIL_BYTES))
        lines = f.read().decode("utf-8", "replace").splitlines()
    for line in reversed(lines):
        if '"assistant"' not in line or '"usage"' not in line:
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a cut first line, a write race, or nested too deeply to parse
        msg = rec.get("message") if isinstance(rec, dict) else None
        if rec.get("type") == "assistant" and not rec.get("isSidechain") and isinstance(msg, dict):
            if isinstance(msg.get("usage"), dict):
                return msg["usage"]
    return None


class HookError(Exception):
    """A problem with the hook's input or environment, in one line."""


def main(stdin=sys.stdin, stdout=sys.stdout, env=os.environ) -> int:
    """Record the sample; on any problem at all, one line on stderr and exit 0."""
    try:
        return _record(stdin, stdout, env)
    except HookError as e:
        note = str(e)
    except RecursionError:
        note = "hook input nested too deeply"
    except OSError as e:
        note = f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
    except Exception as e:  # noqa: BLE001 - the hook promises never to fail the tool call
        note = f"{type(e).__name__}: {e}"
    note = " ".join(note.split())[:300]
    print(f"winnow hook: {note}; context not recorded", file=sys.stderr)
    return 0


def _record(stdin, stdout, env) -> int:
    try:
        from winnow.runtime.budget import DEFAULT_WINDOW, ContextBudget, env_threshold
    except ImportError as e:
        raise HookError(f"winnow is not installed for this python ({e})") from None
    try:
        event = json.loads(stdin.read() or "{}")
        transcript = Path(event["transcript_path"]).expanduser()
        cwd = Path(event.get("cwd") or ".")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise HookError(f"bad hook input ({e.__class__.__name__}: {e})") from None
    raw_window = env.get("HARNESS_CTX_WINDOW") or str(DEFAULT_WINDOW)
    try:
        window = int(raw_window)
    except ValueError:
        window = 0
    if window <= 0:
        raise HookError(
            f"HARNESS_CTX_WINDOW must be a positive number of tokens, got {raw_window!r}"
        )
    try:
        usage = latest_usage(transcript)
    except OSError as e:
        raise HookError(f"cannot read {transcript}: {e.strerror or e}") from None
    if usage is None:
        return 0  # no assistant turn yet
    state = cwd / ".winnow"
    log = env.get("HARNESS_CTX_LOG") or state / "budget.jsonl"
    try:
        budget = ContextBudget(
            log,
            window=window,
            threshold=env_threshold(environ=env),
            checkpoint_path=state / "checkpoint.md",
        )
        sample = budget.record(
            usage, source=f"claude-code:{event.get('session_id', '')}:{event.get('tool_name', '')}"
        )
    except ValueError as e:  # usage figures that are not token counts
        raise HookError(str(e)) from None
    if not sample.crossed:
        return 0
    reason = (
        f"Context at {sample.percent:.0f}% of {window:,} tokens ({sample.used:,}), past the "
        f"{budget.threshold:g}% line. Before the next step, write a checkpoint to "
        f"{budget.checkpoint_path}: goal, completed changes, active files with line ranges, "
        "ruled-out approaches, open failures (error lines verbatim), next immediate step."
    )
    out = {
        "decision": "block",
        "reason": reason,
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": reason},
    }
    stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
