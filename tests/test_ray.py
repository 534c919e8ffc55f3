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
