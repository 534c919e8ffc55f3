"""Batch scoring: classify every unit of every transcript and write per-unit and per-session Parquet.

    from winnow.batch.score import BatchScorer, ScoreConfig
    summary = BatchScorer(ScoreConfig(engine="local")).run(["traces/"], "scores.parquet")

Files are the unit of work: each worker holds one classifier and scores whole files, so every
unit is classified beside its session's other units (the classifier's features look at
neighbours and position) and the output is the same whatever the engine or the worker count.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from winnow.data.extract import SCHEMA as EXTRACT_SCHEMA
from winnow.data.readers import ReadReport, claimed, read_file
from winnow.data.readers.base import iter_files
from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, Unit

SCORE_COLUMNS = tuple(f"score_{c}" for c in CATEGORIES)
# The unit columns keep `winnow extract`'s types, so the two files join on `id`.
UNIT_SCHEMA = pa.schema(
    [
        *[
            EXTRACT_SCHEMA.field(n)
            for n in ("id", "session_id", "index", "role", "kind", "tool_name", "source", "format")
        ],
        ("tokens", pa.int64()),
        ("category", pa.string()),
        *[(c, pa.float32()) for c in SCORE_COLUMNS],
    ]
)
DROP_CATEGORIES = tuple(c for c, s in DEFAULT_STRATEGIES.items() if s.startswith("drop"))
SUMMARIZE_CATEGORIES = tuple(c for c, s in DEFAULT_STRATEGIES.items() if s == "summarize")
SESSION_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("source", pa.string()),
        ("format", pa.string()),
        ("units", pa.int64()),
        ("tokens", pa.int64()),
        *[(f"tokens_{c}", pa.int64()) for c in CATEGORIES],
        ("droppable_share", pa.float64()),
        ("summarizable_share", pa.float64()),
    ]
)


@dataclass
class ScoreConfig:
    """How to run a scoring job."""

    model: str | None = None  # model directory; None = the shipped default
    engine: str = "local"  # "local" (processes on this machine) or "ray"
    workers: int = 0  # 0 = all cores / all CPUs of the Ray cluster; local with 1: no pool
    ray_address: str | None = None  # None = start a local Ray


@dataclass
class FileScores:
    """The scored units of one file and what its reader had to say."""

    path: str
    table: pa.Table
    problems: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)


@dataclass
class ScoreSummary:
    """Totals of a scoring job."""

    files: int = 0
    units: int = 0
    tokens: int = 0
    seconds: float = 0.0
    sessions: int = 0
    tokens_by_category: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    skipped_files: dict[str, list[str]] = field(default_factory=dict)  # reason -> paths

    @property
    def units_per_s(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0


def sessions_path(out: str | Path) -> Path:
    """Where the per-session table of `out` goes: scores.parquet -> scores.sessions.parquet."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".parquet") + ".sessions.parquet")


def list_transcripts(paths: Iterable[str | Path], report: ReadReport) -> list[Path]:
    """Files to score, in a stable order. Same rule as `read_paths`: a file met while walking a
    folder that no reader claims is counted as skipped; a file named explicitly is always tried."""
    out: list[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if not p.is_dir():
            out.append(p)
            continue
        out.extend(f for f in iter_files([p], report.unreadable_folder) if claimed(f, report))
    return out


def token_counter() -> Callable[[Unit], int]:
    """A unit's prompt cost, counted as the compressor counts it."""
    from winnow.serving.tokens import default_token_counter, unit_tokens

    return functools.partial(unit_tokens, counter=default_token_counter())


def score_file(
    path: str | Path, classifier: Any, count_tokens: Callable[[Unit], int]
) -> FileScores:
    """Read and classify one transcript file; never raises (a failure becomes a problem line)."""
    report = ReadReport()
    try:
        units = list(read_file(path, report))
        # One call per file: the classifier's features depend on each unit's place in its session.
        preds = classifier.predict(units) if units else []
    except Exception as e:  # a reader or model bug must not stop a job over many files
        report.problem(path, None, f"failed ({type(e).__name__}: {e}), skipped")
        units, preds = [], []
    cols: dict[str, list] = {name: [] for name in UNIT_SCHEMA.names}
    for u, p in zip(units, preds, strict=True):
        cols["id"].append(u.id)
        cols["session_id"].append(u.session_id)
        cols["index"].append(u.index)
        cols["role"].append(u.role)
        cols["kind"].append(u.kind)
        cols["tool_name"].append(u.tool_name)
        cols["source"].append(u.extra.get("source", str(path)))
        cols["format"].append(u.extra.get("format"))
        cols["tokens"].append(count_tokens(u))
        cols["category"].append(p.category)
        for c, name in zip(CATEGORIES, SCORE_COLUMNS, strict=True):
            cols[name].append(float(p.scores.get(c, 0.0)))
    table = pa.Table.from_pydict(cols, schema=UNIT_SCHEMA)
    return FileScores(str(path), table, report.problems, report.skipped)


class SessionTotals:
    """Accumulates per-session token totals by category while files stream past."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}

    def add(self, table: pa.Table) -> None:
        cols = table.select(["session_id", "source", "format", "category", "tokens"]).to_pydict()
        for sid, src, fmt, cat, tok in zip(*cols.values(), strict=True):
            row = self._rows.get(sid)
            if row is None:
                row = self._rows[sid] = {"source": src, "format": fmt, "units": 0, "by": Counter()}
            row["units"] += 1
            row["by"][cat] += tok

    def __len__(self) -> int:
        return len(self._rows)

    def tokens_by_category(self) -> Counter:
        return sum((row["by"] for row in self._rows.values()), Counter())

    def table(self) -> pa.Table:
        cols: dict[str, list] = defaultdict(list)
        for sid, row in self._rows.items():
            by, total = row["by"], sum(row["by"].values())
            cols["session_id"].append(sid)
            for k in ("source", "format", "units"):
                cols[k].append(row[k])
            cols["tokens"].append(total)
            for c in CATEGORIES:
                cols[f"tokens_{c}"].append(by[c])
            cols["droppable_share"].append(
                sum(by[c] for c in DROP_CATEGORIES) / total if total else 0.0
            )
            cols["summarizable_share"].append(
                sum(by[c] for c in SUMMARIZE_CATEGORIES) / total if total else 0.0
            )
        return pa.Table.from_pydict(
            {n: cols[n] for n in SESSION_SCHEMA.names}, schema=SESSION_SCHEMA
        )


# --- local engine: one classifier per worker process ------------------------------------------

_WORKER: dict[str, Any] = {}


def load_classifier(model: str | None) -> Any:
    """The classifier as every worker holds it: one intra-op thread, parallelism comes from workers."""
    from winnow.serving.classifier import ImportanceClassifier

    return ImportanceClassifier.load(model, threads=1)


def _init_worker(model: str | None) -> None:
    # One worker per core: the tokenizer's own thread pool would only fight the other workers.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER["clf"] = load_classifier(model)
    _WORKER["count"] = token_counter()


def _score_in_worker(path: str) -> FileScores:
    return score_file(path, _WORKER["clf"], _WORKER["count"])


def _run_local(files: Sequence[Path], config: ScoreConfig) -> Iterator[FileScores]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    workers = min(config.workers or os.cpu_count() or 1, len(files))
    if workers == 1:
        clf, count = load_classifier(config.model), token_counter()
        yield from (score_file(f, clf, count) for f in files)
        return
    # spawn: the parent runs a progress thread, and forking a threaded process can deadlock.
    with ProcessPoolExecutor(
        workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(config.model,),
    ) as pool:
        # map keeps input order, so the output is deterministic whatever finishes first.
        yield from pool.map(_score_in_worker, map(str, files))


class BatchScorer:
    """Scores transcript files on local processes or Ray and writes two Parquet tables."""

    def __init__(self, config: ScoreConfig | None = None):
        self.config = config or ScoreConfig()

    def iter_scores(self, files: Sequence[Path]) -> Iterator[FileScores]:
        """Yield the scores of each file, in input order."""
        if self.config.engine not in ("local", "ray"):
            raise ValueError(f"unknown engine {self.config.engine!r} (expected 'local' or 'ray')")
        if not files:
            return iter(())
        load_classifier(self.config.model)  # a bad model directory fails here, once, in one line
        if self.config.engine == "local":
            return _run_local(files, self.config)
        from winnow.batch.ray_engine import run_ray

        return run_ray(files, self.config)

    def run(
        self,
        paths: Iterable[str | Path],
        out: str | Path,
        on_file: Callable[[FileScores], None] | None = None,
        on_start: Callable[[int], None] | None = None,
    ) -> ScoreSummary:
        """Score every transcript under `paths` into `out` and its `.sessions.parquet` sibling.

        Both files appear only when some unit was scored: a job that read nothing (a missing
        path, no transcripts) writes nothing. `on_start(n_files)` and `on_file(scores)` let a
        caller show progress.
        """
        t0 = time.perf_counter()
        report = ReadReport()
        files = list_transcripts(paths, report)
        summary = ScoreSummary(skipped=report.skipped, skipped_files=report.skipped_files)
        summary.problems.extend(report.problems)  # folders that could not be listed
        scores = self.iter_scores(files)  # a bad engine or model fails here, before any output
        if on_start:
            on_start(len(files))
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        final = (out, sessions_path(out))
        tmp = tuple(p.with_name(f".{p.name}.{os.getpid()}.tmp") for p in final)
        sessions = SessionTotals()
        try:
            with pq.ParquetWriter(tmp[0], UNIT_SCHEMA) as writer:
                for fs in scores:
                    summary.problems.extend(fs.problems)
                    summary.skipped.update(fs.skipped)
                    if fs.table.num_rows:
                        writer.write_table(fs.table)
                        sessions.add(fs.table)
                        summary.files += 1
                        summary.units += fs.table.num_rows
                    if on_file:
                        on_file(fs)
            pq.write_table(sessions.table(), tmp[1])
            if summary.units:
                for t, f in zip(tmp, final, strict=True):
                    t.replace(f)
        finally:
            for t in tmp:
                t.unlink(missing_ok=True)
        summary.sessions = len(sessions)
        summary.tokens_by_category = sessions.tokens_by_category()
        summary.tokens = sum(summary.tokens_by_category.values())
        summary.seconds = time.perf_counter() - t0
        return summary
