"""The Ray Data engine gives the same tables as the local engine."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from winnow.batch.score import BatchScorer, ScoreConfig, sessions_path

ray = pytest.importorskip("ray")
FIXTURES = Path(__file__).parent / "fixtures" / "batch"


@pytest.fixture(scope="session")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_and_local_engines_write_identical_tables(local_ray, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")  # a file with no units travels through Ray too
    outs = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.parquet"
        summary = BatchScorer(ScoreConfig(engine=engine, workers=2)).run([FIXTURES, bad], out)
        outs[engine] = (summary, pq.read_table(out), pq.read_table(sessions_path(out)))
    (ls, lu, lsess), (rs, ru, rsess) = outs["local"], outs["ray"]
    assert lu.num_rows == ru.num_rows > 0
    for local, remote in ((lu, ru), (lsess, rsess)):
        assert local.schema == remote.schema
        for name in local.column_names:
            assert local[name].equals(remote[name]), f"column {name} differs"
    assert ls.problems == rs.problems and ls.skipped == rs.skipped
    assert any(p.startswith(str(bad)) for p in rs.problems)


@pytest.mark.slow
def test_ray_run_is_quiet_on_success(local_ray, tmp_path, capfd):
    """Only the run's own lines reach the terminal: no Ray log lines (Ray Data's actor pool
    logged an error-level `core_worker.cc ... max_restarts` line on every successful run)."""
    import logging

    from winnow.cli import main

    out = tmp_path / "scores.parquet"
    assert main(["score", str(FIXTURES), "--engine", "ray", "--workers", "2", "-o", str(out)]) == 0
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    noise = [line for line in lines if "broken.jsonl" not in line and "scoring" not in line]
    noise = [line for line in noise if not line.startswith(("skipped", "  "))]  # skipped files
    assert not noise, "\n".join(noise)
    assert logging.getLogger("ray").isEnabledFor(logging.ERROR)  # errors still show
    assert not logging.getLogger("ray").isEnabledFor(logging.INFO)
