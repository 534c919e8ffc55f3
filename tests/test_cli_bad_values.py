"""Every command (but `compress`, tested in test_compress_cli.py) with bad option values: one
line on stderr, exit 1, no traceback, and nothing started."""

from __future__ import annotations

import json
from pathlib import Path

from winnow.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
SESSION = str(FIXTURES / "demo_session.jsonl")


def cases(tmp: Path) -> list[tuple[list[str], str]]:
    """(argv, a word the one-line message must hold)."""
    MISSING = str(tmp / "missing" / "x")  # noqa: N806 - no case may create it
    a_file = tmp / "file.txt"
    a_file.write_text("not parquet\n")
    notes = tmp / "notes.jsonl"
    notes.write_text("{not json\n")
    binary = tmp / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    (tmp / "units.parquet").write_text("not parquet")
    return [
        # extract
        (["extract", MISSING], "x"),
        (["extract", SESSION, "-o", str(tmp)], str(tmp)),
        (["extract", SESSION, "-o", str(a_file / "out.parquet")], "file.txt"),
        # label
        (["label", MISSING], "x"),
        (["label", SESSION, "--show", "-3"], "--show"),
        (["label", SESSION, "--show", "x"], "--show"),
        (["label", SESSION, "--labels", MISSING], "x"),
        (["label", SESSION, "--labels", str(tmp)], str(tmp)),
        (["label", SESSION, "-o", str(tmp)], str(tmp)),
        # dataset
        (["dataset", MISSING], "x"),
        (["dataset", str(a_file)], "file.txt"),
        (["dataset", str(a_file), "--ratios", "0.8", "0.1", "x"], "--ratios"),
        (["dataset", str(a_file), "--ratios", "-1", "1", "1"], "ratios"),
        (["label", str(tmp / "units.parquet")], "units.parquet"),
        (["dataset", str(a_file), "--ratios", "0.8", "0.1"], "--ratios"),
        # train
        (["train", MISSING, "-o", str(tmp / "m")], "x"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--epochs", "0"], "--epochs"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--epochs", "x"], "--epochs"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--lr", "nan"], "--lr"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--lr", "-1"], "--lr"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--batch-size", "0"], "--batch-size"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--threads", "-2"], "--threads"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--max-len", "0"], "--max-len"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--d-model", "-1"], "--d-model"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--layers", "0"], "--layers"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--vocab-size", "1"], "--vocab-size"),
        (["train", str(tmp), "-o", str(tmp / "m"), "--patience", "-1"], "--patience"),
        (
            ["train", str(tmp), "-o", str(tmp / "m"), "--heuristic-weight", "inf"],
            "--heuristic-weight",
        ),
        (["train", str(tmp), "-o", str(a_file)], "file.txt"),
        # evaluate
        (["evaluate", MISSING, str(tmp)], "x"),
        (["evaluate", str(tmp), MISSING], "x"),
        (["evaluate", "default", str(tmp), "--split", "nope"], "nope"),
        # release
        (["release", "--traces", MISSING, "-o", str(tmp / "r")], "x"),
        (["release", "--traces", SESSION, "-o", str(tmp / "r")], "no such folder"),
        (["release", "--kind", "transformer", "--traces", SESSION, "-o", str(tmp / "r")], "folder"),
        (["release", "--traces", str(tmp), "--seeds", "0", "-o", str(tmp / "r")], "--seeds"),
        (["release", "--traces", str(tmp), "--epochs", "-1", "-o", str(tmp / "r")], "--epochs"),
        (["release", "--traces", str(tmp), "--labels", MISSING, "-o", str(tmp / "r")], "x"),
        (["release", "--traces", str(tmp), "-o", str(a_file)], "file.txt"),
        # classify
        (["classify", MISSING], "x"),
        (["classify", SESSION, "--threads", "0"], "--threads"),
        (["classify", SESSION, "--threads", "x"], "--threads"),
        (["classify", SESSION, "--model", str(tmp)], str(tmp)),
        (["classify", SESSION, "-o", str(tmp)], str(tmp)),
        # economics
        (["economics", "--tokens", "x"], "--tokens"),
        (["economics", "--tokens", "1e400"], "--tokens"),
        (["economics", "--resume-probability", "2"], "--resume-probability"),
        (["economics", "--resume-probability", "nan"], "--resume-probability"),
        (["economics", "--custom", "1/x/3"], "--custom"),
        (["economics", "--custom", "1/2/3/1e400"], "--custom"),
        (["economics", "--profile", "nope"], "nope"),
        # budget
        (["budget", "x"], "USED"),
        (["budget", "1", "0"], "WINDOW"),
        (["budget", "1", "--threshold", "0"], "--threshold"),
        (["budget", "1", "--threshold", "nan"], "--threshold"),
        (["budget", "report", MISSING], "x"),
        (["budget", "report", str(notes)], "notes.jsonl"),
        (["budget", "report", str(tmp)], str(tmp)),
        # audit
        (["audit", MISSING], "x"),
        (["audit", str(tmp)], str(tmp)),
        (["audit", str(binary)], "bin.jsonl"),
        (["audit", str(notes)], "notes.jsonl"),
        # score
        (["score", MISSING, "-o", str(tmp / "s.parquet")], "x"),
        (["score", SESSION, "--workers", "-1", "-o", str(tmp / "s.parquet")], "--workers"),
        (["score", SESSION, "--workers", "x"], "--workers"),
        (["score", SESSION, "--engine", "spark"], "--engine"),
        (["score", SESSION, "--model", str(tmp), "-o", str(tmp / "s.parquet")], str(tmp)),
        (["score", SESSION, "-o", str(tmp)], str(tmp)),
        # serve
        (["serve", "--port", "x"], "--port"),
        (["serve", "--port", "70000"], "--port"),
        (["serve", "--max-bytes", "0"], "--max-bytes"),
        (["serve", "--threads", "0"], "--threads"),
        (["serve", "--body-timeout", "-1"], "--body-timeout"),
        (["serve", "--body-timeout", "nan"], "--body-timeout"),
        (["serve", "--max-uploads", "0"], "--max-uploads"),
        (["serve", "--model", str(tmp)], str(tmp)),
        # proxy
        (["proxy", "--upstream", "http://127.0.0.1:9", "--port", "70000"], "--port"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--budget", "x"], "--budget"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--budget", "150%"], "--budget"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--window", "0"], "--window"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--timeout", "nan"], "--timeout"),
        (["proxy", "--upstream", "http://127.0.0.1:9", "--audit", str(a_file)], "file.txt"),
        (["proxy", "--upstream", "ftp://x"], "--upstream"),
        (["proxy", "report", MISSING], "x"),
        # cib
        (["cib", "--plan", "--window", "0"], "window"),
        (["cib", "--plan", "--n", "0"], "--n"),
        (["cib", "--plan", "--arms", "nope"], "nope"),
        (["cib", "--plan", "--budget", "150"], "budget"),
        (["cib", "--plan", "--buckets", "x"], "--buckets"),
        (["cib", "--plan", "--probes", MISSING], "x"),
        (["cib", "--plan", "--concurrency", "0"], "--concurrency"),
        (["cib", "--plan", "--max-tokens", "-1"], "--max-tokens"),
        (["cib", "--plan", "--max-retries", "-1"], "--max-retries"),
        (["cib", "--plan", "--timeout", "0"], "--timeout"),
        (["cib", "--plan", "--tps", "0"], "--tps"),
        (["cib", "--model", "m"], "--base-url"),
        (
            ["cib", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "-o", str(a_file)],
            "file.txt",
        ),
        # the command line itself
        (["nope"], "nope"),
        (["label"], "PATH"),
    ]


def test_every_command_with_bad_values_is_one_line_and_exit_1(tmp_path, capsys):
    failures = []
    for argv, word in cases(tmp_path):
        try:
            code = main(argv)
        except BaseException as e:  # noqa: BLE001 - a traceback or an argparse exit is a failure
            code = f"{type(e).__name__}: {e}"
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        if code != 1 or len(lines) != 1 or word not in err or "Traceback" in err:
            failures.append(f"{' '.join(argv)} -> exit {code}: {err.strip()[:300]!r}")
    assert not failures, "\n".join(failures)


def test_a_normalized_unit_with_bad_scores_is_a_bad_record(tmp_path, capsys):
    good = {"id": "s:0", "session_id": "s", "index": 0, "role": "user", "kind": "text"}
    lines = [
        {**good, "text": "Add rate limiting.", "category": "requirement", "scores": {"requirement": 0.9}},
        {**good, "id": "s:1", "index": 1, "text": "ok", "category": "acknowledgment", "scores": "zz"},
        {**good, "id": "s:2", "index": 2, "text": "done", "category": "status", "scores": {"status": "x"}},
        {**good, "id": "s:3", "index": 3, "text": "Running the tests now.", "category": "status"},
    ]  # fmt: skip
    path = tmp_path / "units.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out.jsonl"
    argv = ["compress", str(path), "--limit", "12", "--on-overflow", "truncate_oldest"]
    assert main([*argv, "-o", str(out)]) == 0  # was an AttributeError on the string scores
    said = "".join(capsys.readouterr())
    for n in (2, 3):
        assert f"{path}:{n}: wrong field type: `scores`" in said
    kept = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert kept == ["s:0"]  # the bad records reported and skipped, the good ones compressed
