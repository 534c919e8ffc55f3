"""The command line as a newcomer meets it: help that shows choices and defaults, `-o -` as
standard output, one-line errors, and nothing written by a job that failed."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys

import pytest

from winnow.cli import build_parser, main
from winnow.data.readers import read_paths
from winnow.data.schema import CATEGORIES

SUBCOMMANDS = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]


def _documented_default(action: argparse.Action) -> bool:
    """True when an option has no default worth showing, or its help shows it."""
    if action.default in (None, False, argparse.SUPPRESS, []) or action.nargs == 0:
        return True
    return "default" in (action.help or "")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_help_shows_every_choice_and_default(name):
    sub = SUBCOMMANDS[name]
    text = sub.format_help()
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = "/".join(action.option_strings) or action.dest
        assert _documented_default(action), f"winnow {name} {flag}: default not in its help"
        for choice in action.choices or ():
            assert str(choice) in text, f"winnow {name} {flag}: choice {choice!r} not shown"


def test_every_command_is_listed_in_the_readme(root):
    readme = (root / "README.md").read_text()
    missing = [name for name in SUBCOMMANDS if f"winnow {name}" not in readme]
    assert not missing, f"commands missing from the README: {missing}"


def test_classify_writes_records_to_stdout_and_nothing_named_dash(
    demo_session, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "winnow.cli", "classify", str(demo_session), "-o", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["id"] for r in records] == [u.id for u in read_paths([demo_session])]
    assert all(r["category"] in CATEGORIES and r["scores"] for r in records)
    assert "wrote standard output" in run.stderr
    assert not (tmp_path / "-").exists()


def test_classify_show_prints_one_line_per_unit(demo_session, capsys):
    units = list(read_paths([demo_session]))
    assert main(["classify", str(demo_session), "--show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(units)
    for unit, line in zip(units, lines):
        unit_id, category, confidence = line.split()[:3]
        assert unit_id == unit.id and category in CATEGORIES
        assert 0 < float(confidence) <= 1


def test_compress_dash_is_stdout(demo_session, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["compress", str(demo_session), "--limit", "30%", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert out and all(json.loads(line)["id"] for line in out.splitlines())
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["dataset", "x.parquet", "-o", "-"],
        ["score", "somewhere", "-o", "-"],
        ["train", "data", "-o", "-"],
    ],
)
def test_dash_where_a_stream_cannot_work_is_one_line(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "standard output" in err and "\n" not in err
    assert not any(tmp_path.iterdir())


def test_missing_extra_is_one_line_naming_it(demo_session, tmp_path):
    # A fresh interpreter in which pyarrow cannot be imported, as in the base install.
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pyarrow':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from winnow.cli import main\n"
        f"sys.exit(main(['extract', {str(demo_session)!r}, '-o', 'out.parquet']))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert run.returncode == 1
    assert run.stderr.strip() == (
        "winnow extract: needs pyarrow, which the base install leaves out: "
        "pip install 'winnow[parquet]'"
    )
    assert not any(tmp_path.iterdir())


def test_compress_help_lists_its_output_formats():
    text = SUBCOMMANDS["compress"].format_help()
    assert "--to {normalized,anthropic,openai}" in " ".join(text.split())


def test_extract_names_every_skipped_file(fixtures, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    src = tmp_path / "in"
    src.mkdir()
    (src / "session.jsonl").write_bytes((fixtures / "demo_session.jsonl").read_bytes())
    for name in ("LICENSE", "notes.txt", "more.txt"):
        (src / name).write_text("not a transcript\n")
    assert main(["extract", str(src), "-o", str(tmp_path / "m.parquet")]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 file(s), not a transcript (.txt):" in out
    assert "skipped 1 file(s), not a transcript (LICENSE):" in out
    for name in ("LICENSE", "notes.txt", "more.txt"):
        assert str(src / name) in out


def test_extract_to_stdout_keeps_the_summary_off_it(demo_session, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    run = subprocess.run(
        [sys.executable, "-m", "winnow.cli", "extract", str(demo_session), "-o", "-"],
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    (tmp_path / "out.parquet").write_bytes(run.stdout)
    ids = pq.read_table(tmp_path / "out.parquet").column("id").to_pylist()
    assert ids == [u.id for u in read_paths([demo_session])]
    assert b"wrote standard output" in run.stderr


@pytest.mark.parametrize("command", ["score", "extract"])
def test_a_job_that_read_nothing_writes_nothing(command, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "out.parquet"
    assert main([command, str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert "missing.jsonl: no such file" in captured.err + captured.out
    assert list(tmp_path.iterdir()) == [], "no output, no temporary file"


def test_output_appears_only_on_commit(tmp_path):
    from winnow.cli import Output

    dest = tmp_path / "new" / "folder" / "out.jsonl"
    with Output(dest) as out:
        out.path.write_text("partial")
    assert not (tmp_path / "new").exists(), (
        "an uncommitted output leaves nothing, not even its folder"
    )
    existing = tmp_path / "kept.jsonl"
    existing.write_text("old")
    with pytest.raises(RuntimeError), Output(existing) as out:
        out.path.write_text("half")
        raise RuntimeError("the job failed")
    assert existing.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [
        "kept.jsonl"
    ]
    with Output(dest) as out:
        out.path.write_text("done")
        out.commit()
    assert dest.read_text() == "done"


@pytest.mark.parametrize("command", ["classify", "extract"])
def test_an_output_that_is_a_folder_is_one_line_and_writes_nothing(
    command, demo_session, tmp_path, capsys
):
    if command == "extract":
        pytest.importorskip("pyarrow")
    folder = tmp_path / "out"
    folder.mkdir()
    assert main([command, str(demo_session), "-o", str(folder)]) == 1
    err = capsys.readouterr().err
    assert f"winnow {command}: " in err and str(folder) in err and "Traceback" not in err
    assert list(folder.iterdir()) == [] and sorted(tmp_path.iterdir()) == [folder]


@pytest.mark.parametrize(
    "argv",
    [
        ["classify"],
        ["compress", "--limit", "50%", "--to", "openai"],
        ["compress", "--limit", "50%"],
    ],
)
def test_an_output_under_a_file_is_one_line(argv, demo_session, tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.write_text("mine")
    rc = main([argv[0], str(demo_session), *argv[1:], "-o", str(plain / "out.json")])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err and str(plain) in err
    assert err.strip().count("\n") == 0 and plain.read_text() == "mine"


def test_classify_and_label_show_print_no_terminal_controls(tmp_path, capsys):
    """A transcript's ANSI sequences (a coloured tool output), carriage returns and bidi
    overrides are shown escaped on the terminal; the file output keeps the text as it is."""
    text = "\x1b[31m0 errors\x1b[0m, done\rX \u202eevil\x9b2J"
    session = tmp_path / "s.jsonl"
    units = [
        {
            "id": "s:0",
            "session_id": "s",
            "index": 0,
            "role": "user",
            "kind": "text",
            "text": "run lint",
        },
        {
            "id": "s:1\x1b[2J",
            "session_id": "s",
            "index": 1,
            "role": "tool",
            "kind": "tool_result",
            "text": text,
            "tool_name": "Bash\x07",
        },
    ]
    session.write_text("".join(json.dumps(u) + "\n" for u in units))
    assert main(["classify", str(session), "--show"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r\u202e\x9b"), repr(out)
    assert "\\x1b[31m0 errors" in out and "\\u202eevil" in out
    assert main(["classify", str(session), "-o", str(tmp_path / "out.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert records[1]["text"] == text
    if importlib.util.find_spec("pyarrow") is not None:
        capsys.readouterr()
        argv = ["label", str(session), "-o", str(tmp_path / "l.parquet"), "--show", "5"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert not any(c in out for c in "\x1b\x07\r\u202e\x9b"), repr(out)
