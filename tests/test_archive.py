"""Archives and audit logs: one record a line whatever the text, names never reused, hashes."""

from __future__ import annotations

import json
import re
import threading
from hashlib import sha256

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from winnow.cli import main
from winnow.runtime.archive import AuditLog, read_audit, restore
from winnow.runtime.llm import Conversation

# Every character str.splitlines() breaks at, every C0 / C1 control, DEL, BOM, a lone surrogate
BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
CONTROLS = "".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))
NASTY = BREAKERS + CONTROLS + "\ufeff\udfff\ud800\U0001f600\u0301\\\"'"
# A high surrogate right before a low one is, in JSON as in UTF-16, the astral character
# they encode: no format keeps the two apart, so they are not "text" to round-trip.
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def conversation(text: str) -> Conversation:
    return Conversation(
        "anthropic",
        "claude-sonnet-4-5",
        [
            {"role": "user", "content": text},
            {"role": "assistant", "content": [{"type": "text", "text": f"<{text}>"}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t" + text, "content": text}],
            },
        ],
        system=text or None,
        tools=[{"name": "Read", "description": text, "input_schema": {"type": "object"}}],
    )


def test_archive_with_every_line_separator_and_control_restores(tmp_path):
    conv = conversation(NASTY)
    path = AuditLog(tmp_path, "s").archive(conv, "compact")
    data = path.read_bytes()
    assert data.count(b"\n") == 4  # a header and three messages, one line each
    for line in data.decode().splitlines():  # also line by line for tools that split everywhere
        json.loads(line)
    restored = restore(path)
    assert restored.messages == conv.messages and restored.system == conv.system
    assert restored.encode() == conv.encode()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(st.characters(codec=None, exclude_categories=())) | st.sampled_from([NASTY]))
def test_archives_round_trip_any_text(tmp_path, text):
    assume(not _PAIR.search(text))
    conv = conversation(text)
    log = AuditLog(tmp_path, "h")
    path = log.archive(conv, "compact")
    log.record("compact", note=text, archive=str(path))
    assert restore(path).encode() == conv.encode()
    assert read_audit(log.path)[-1]["note"] == text
    for line in path.read_text(encoding="utf-8").splitlines():  # no stray line breaks
        json.loads(line)


def test_names_are_never_reused(tmp_path):
    conv = conversation("hello")
    log = AuditLog(tmp_path, "s")
    first = [log.archive(conv, "compact") for _ in range(3)]
    assert [p.name for p in first] == [f"s.{n:03d}.compact.jsonl" for n in (1, 2, 3)]
    log.record("compact", archive=str(first[2]))
    first[1].unlink()
    first[2].unlink()  # the highest one, still named in the audit log
    restarted = AuditLog(tmp_path, "s").archive(conv, "truncate")
    assert restarted.name == "s.004.truncate.jsonl"
    assert restore(first[0]).messages == conv.messages  # untouched


def test_two_loggers_of_one_session_never_overwrite(tmp_path):
    convs = [conversation(f"writer {i}") for i in range(8)]
    logs = [AuditLog(tmp_path, "s") for _ in range(8)]
    paths = [None] * 8
    barrier = threading.Barrier(8)

    def write(i):
        barrier.wait()
        paths[i] = logs[i].archive(convs[i], "compact")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({p.name for p in paths}) == 8
    for p, conv in zip(paths, convs):
        assert restore(p).messages == conv.messages  # each holds its own writer's conversation


def test_restore_and_read_audit_name_the_bad_line(tmp_path):
    path = AuditLog(tmp_path, "s").archive(conversation("x"), "compact")
    lines = path.read_text().split("\n")
    lines[2] = lines[2][:10]
    path.write_text("\n".join(lines))
    try:
        restore(path)
    except ValueError as e:
        assert f"{path}:3:" in str(e)
    else:
        raise AssertionError("a cut archive restored")


def _audited(tmp_path, text="hello"):
    conv = conversation(text)
    log = AuditLog(tmp_path, "s")
    path = log.archive(conv, "compact")
    before = conv.encode()
    log.record(
        "compact",
        trigger="idle_ttl",
        tokens_before=100,
        tokens_after=10,
        bytes_before=len(before),
        sha256_before=sha256(before).hexdigest(),
        archive=str(path),
    )
    return log, path


def test_audit_compares_content_hashes(tmp_path, capsys):
    log, path = _audited(tmp_path, "hello\u2028world")
    assert main(["audit", str(log.path)]) == 0
    assert "restores" in capsys.readouterr().out
    # same size, other content: a byte-length check would pass it
    path.write_bytes(path.read_bytes().replace(b"hello", b"hullo"))
    assert main(["audit", str(log.path)]) == 1
    assert "content differs" in capsys.readouterr().out
    # an entry from before hashes were recorded: the size is all there is
    entry = read_audit(log.path)[0]
    del entry["sha256_before"]
    log.path.write_text(json.dumps(entry) + "\n")
    assert main(["audit", str(log.path)]) == 0
    assert "size only" in capsys.readouterr().out


def test_audit_of_a_damaged_log_is_one_line(tmp_path, capsys):
    log, _ = _audited(tmp_path)
    with log.path.open("a") as f:
        f.write("{not json\n")
    assert main(["audit", str(log.path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{log.path}:2:" in err
    # entries of the wrong shape are shown as they are, never a traceback
    log.path.write_text(json.dumps({"event": "compact", "time": "x", "tokens_before": []}) + "\n")
    assert main(["audit", str(log.path)]) == 0


def test_audit_of_a_log_cut_mid_line_keeps_the_entries_before(tmp_path, capsys):
    """A harness killed mid-write leaves a cut last line: the entries before it are still
    listed and checked, and the cut line is named (exit 1: one entry could not be checked)."""
    log, _ = _audited(tmp_path)
    with log.path.open("a") as f:
        f.write('{"time": 2, "session_id": "s", "event": "comp')
    assert main(["audit", str(log.path)]) == 1
    out, err = capsys.readouterr()
    assert "restores" in out and "compact" in out
    assert f"{log.path}:2:" in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_audit_and_restore_of_deeply_nested_lines_are_one_line(tmp_path, capsys):
    log, path = _audited(tmp_path)
    deep = "[" * 100_000 + "]" * 100_000
    with log.path.open("a") as f:
        f.write(deep + "\n")
    assert main(["audit", str(log.path)]) == 1
    out, err = capsys.readouterr()
    assert "restores" in out and f"{log.path}:2:" in err and "Traceback" not in err
    # the archive itself damaged the same way: named, never a RecursionError
    with path.open("a") as f:
        f.write(deep + "\n")
    try:
        restore(path)
    except ValueError as e:
        assert f"{path}:" in str(e)
    else:
        raise AssertionError("a damaged archive restored")
    assert main(["audit", str(log.path)]) == 1
    out, err = capsys.readouterr()
    assert "unreadable" in out and "Traceback" not in err
    # and a new archive still gets a fresh number past the damaged log's
    assert (
        AuditLog(tmp_path, "s").archive(conversation("y"), "compact").name == "s.002.compact.jsonl"
    )
