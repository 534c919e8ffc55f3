"""`winnow extract`: transcripts to one Parquet table of units."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from winnow.cli import main
from winnow.data.extract import SCHEMA, ExtractConfig, extract, load_units
from winnow.data.readers import ReadReport, read_paths

FIXTURES = Path(__file__).parent / "fixtures" / "readers_a"
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def test_extract_writes_every_unit_with_source_and_format(tmp_path):
    out = tmp_path / "messages.parquet"
    report = extract([FIXTURES], out)
    table = pq.read_table(out)
    assert table.schema.names == SCHEMA.names
    assert table.num_rows == report.units == 92
    assert Counter(table.column("format").to_pylist()) == {
        "claude_code": 41,
        "codex": 20,
        "copilot": 17,
        "gemini": 14,
    }
    expected = [u.to_dict() for u in read_paths([FIXTURES])]
    assert [u.to_dict() for u in load_units(out)] == expected
    assert set(table.column("source").to_pylist()) == {str(p) for p in FIXTURES.glob("*.jsonl")}


def test_extract_streams_in_row_groups(tmp_path):
    out = tmp_path / "m.parquet"
    report = extract([FIXTURES], out, config=ExtractConfig(row_group_rows=10))
    meta = pq.ParquetFile(out).metadata
    assert meta.num_rows == report.units
    assert meta.num_row_groups == -(-report.units // 10)


def test_extract_keeps_extra_fields(tmp_path):
    out = tmp_path / "m.parquet"
    extract([FIXTURES / "claude_code.jsonl"], out)
    meta_units = [u for u in load_units(out) if u.extra.get("meta")]
    assert meta_units and all(u.role == "user" for u in meta_units)


def test_extract_nothing_readable_writes_nothing(tmp_path):
    (tmp_path / "notes.txt").write_text("no transcript here\n")
    out = tmp_path / "m.parquet"
    report = extract([tmp_path / "notes.txt"], out)
    assert report.files == 0 and len(report.problems) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [tmp_path / "notes.txt"]


def test_cli_extract_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "m.parquet"
    assert main(["extract", str(FIXTURES), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 92 units from 5 sessions in 5 files" in " ".join(printed.split())
    for word in (
        "tool_call",
        "assistant",
        "claude_code",
        "copilot: hook.start",
        "not a transcript",
    ):
        assert word in printed
    assert pq.read_metadata(out).num_rows == 92


@pytest.mark.slow
def test_extract_all_traces(tmp_path):
    if not TRACES.is_dir():
        pytest.skip("../shared/traces not present")
    out = tmp_path / "m.parquet"
    report = ReadReport()
    extract([TRACES], out, report=report)
    assert report.problems == []
    assert pq.read_metadata(out).num_rows == report.units > 10_000
