"""Batch scoring on the local engine: both Parquet tables, bad files, the CLI."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from winnow.batch.score import SCORE_COLUMNS, BatchScorer, ScoreConfig, sessions_path
from winnow.cli import main
from winnow.data.readers import ReadReport, read_paths
from winnow.data.schema import CATEGORIES

FIXTURES = Path(__file__).parent / "fixtures" / "batch"


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    out = tmp_path_factory.mktemp("score") / "scores.parquet"
    summary = BatchScorer(ScoreConfig(workers=2)).run([FIXTURES], out)
    return summary, pq.read_table(out), pq.read_table(sessions_path(out))


def test_every_unit_is_scored_in_reader_order(scored):
    summary, units, _ = scored
    expected = list(read_paths([FIXTURES], ReadReport()))
    assert units.num_rows == summary.units == len(expected) > 0
    assert units.column("id").to_pylist() == [u.id for u in expected]
    assert set(units.column("category").to_pylist()) <= set(CATEGORIES)


def test_scores_are_distributions_whose_argmax_is_the_category(scored):
    """The category is the classifier's decision: the argmax, or the likeliest must-keep
    category once the must-keep probabilities reach the model's threshold."""
    from winnow.data.schema import MUST_KEEP
    from winnow.serving.classifier import ImportanceClassifier

    cal = ImportanceClassifier.load().manifest.calibration
    _, units, _ = scored
    rows = units.select(["category", *SCORE_COLUMNS]).to_pylist()
    for row in rows:
        scores = [row[c] for c in SCORE_COLUMNS]
        assert sum(scores) == pytest.approx(1.0, abs=1e-3)
        keep = [row[f"score_{c}"] for c in CATEGORIES if c in MUST_KEEP]
        flipped = cal.must_keep_threshold is not None and sum(keep) >= cal.must_keep_threshold
        if flipped and row["category"] in MUST_KEEP:
            assert row[f"score_{row['category']}"] == max(keep)
        else:
            assert row[f"score_{row['category']}"] == max(scores)


def test_session_totals_add_up(scored):
    summary, units, sessions = scored
    assert sessions.num_rows == summary.sessions == len(set(units.column("session_id").to_pylist()))
    assert pc.sum(sessions.column("tokens")).as_py() == pc.sum(units.column("tokens")).as_py()
    by_cat = sum(pc.sum(sessions.column(f"tokens_{c}")).as_py() for c in CATEGORIES)
    assert by_cat == summary.tokens
    for col in ("droppable_share", "summarizable_share"):
        assert all(0.0 <= x <= 1.0 for x in sessions.column(col).to_pylist())


def test_bad_files_are_reported_and_skipped_not_fatal(scored):
    summary, units, _ = scored
    assert any(p.startswith(str(FIXTURES / "broken.jsonl")) for p in summary.problems)
    assert any("not a transcript" in reason for reason in summary.skipped)  # notes.txt, SOURCES.txt
    assert not any(s.endswith("notes.txt") for s in units.column("source").to_pylist())


def test_cli_writes_both_tables_and_names_a_bad_file(tmp_path, capsys):
    out = tmp_path / "s.parquet"
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    good = FIXTURES / "claude_code_small.jsonl"
    assert main(["score", str(good), str(bad), "-o", str(out), "--workers", "1"]) == 0
    assert pq.read_table(out).num_rows > 0
    assert pq.read_table(sessions_path(out)).num_rows == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def test_unknown_engine_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unknown engine"):
        BatchScorer(ScoreConfig(engine="spark")).run(
            [FIXTURES / "copilot.jsonl"], tmp_path / "x.parquet"
        )


def test_in_process_run_matches_the_worker_pool(scored, tmp_path):
    out = tmp_path / "one.parquet"
    BatchScorer(ScoreConfig(workers=1)).run([FIXTURES], out)
    assert pq.read_table(out).equals(scored[1])
    assert pq.read_table(sessions_path(out)).equals(scored[2])


def test_bad_model_directory_is_one_line_and_no_output(tmp_path, capsys):
    out = tmp_path / "s.parquet"
    assert (
        main(["score", str(FIXTURES), "-o", str(out), "--model", str(tmp_path)]) == 1
    )  # a bad option value, as every other
    err = capsys.readouterr().err
    assert str(tmp_path) in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
