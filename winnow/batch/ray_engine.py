"""The Ray Data engine of `BatchScorer`: the same per-file job spread over a Ray cluster.

The file list becomes a dataset with one block per file; `map_batches` runs `_FileScorer`, an
actor class holding one onnxruntime session, on each file; results stream back to the driver in
input order and go through the same writer as the local engine, so both outputs are identical.
On a cluster (`ray_address`) the files must be readable at the same paths on every node.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa

from winnow.batch.score import (
    UNIT_SCHEMA,
    FileScores,
    ScoreConfig,
    load_classifier,
    score_file,
    token_counter,
)

# One output row per file: the scored units as a nested column, the reader's report beside them.
_FILE_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("problems", pa.list_(pa.string())),
        ("skipped", pa.map_(pa.string(), pa.int64())),
        ("units", pa.list_(pa.struct(list(UNIT_SCHEMA)))),
    ]
)


class _FileScorer:
    """Ray actor: loads the classifier once, then scores the files of each batch."""

    def __init__(self, model: str | None):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one actor per CPU, as local workers
        self.clf = load_classifier(model)
        self.count = token_counter()

    def __call__(self, batch: pa.Table) -> pa.Table:
        scored = [score_file(p, self.clf, self.count) for p in batch["path"].to_pylist()]
        offsets = [0]
        for fs in scored:
            offsets.append(offsets[-1] + fs.table.num_rows)
        structs = [fs.table.to_struct_array().combine_chunks() for fs in scored]
        units = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.concat_arrays(structs))
        return pa.Table.from_arrays(
            [
                pa.array([fs.path for fs in scored], pa.string()),
                pa.array([fs.problems for fs in scored], _FILE_SCHEMA.field("problems").type),
                pa.array(
                    [list(fs.skipped.items()) for fs in scored], _FILE_SCHEMA.field("skipped").type
                ),
                units,
            ],
            schema=_FILE_SCHEMA,
        )


def run_ray(files: Sequence[Path], config: ScoreConfig) -> Iterator[FileScores]:
    """Score `files` on Ray (a local one unless `config.ray_address`), yielding in input order."""
    import ray
    import ray.data

    started = False
    if not ray.is_initialized():
        kw = {"address": config.ray_address} if config.ray_address else {"num_cpus": os.cpu_count()}
        ray.init(**kw, include_dashboard=False, log_to_driver=False, configure_logging=False)
        started = True
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False  # the CLI draws its own bar over files
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # and prints its own summary
        cpus = int(ray.cluster_resources().get("CPU", 1))
        workers = max(1, min(config.workers or cpus, len(files)))
        ds = ray.data.from_items([{"path": str(f)} for f in files], override_num_blocks=len(files))
        ds = ds.map_batches(
            _FileScorer,
            fn_constructor_kwargs={"model": config.model},
            batch_size=1,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=1,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            units = batch["units"].combine_chunks()
            for i, (path, problems, skipped) in enumerate(
                zip(
                    *batch.select(["path", "problems", "skipped"]).to_pydict().values(), strict=True
                )
            ):
                yield FileScores(
                    path=path,
                    table=pa.Table.from_struct_array(units[i].values),
                    problems=problems,
                    skipped=Counter(dict(skipped)),
                )
    finally:
        if started:
            ray.shutdown()
