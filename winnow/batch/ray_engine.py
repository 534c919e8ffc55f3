"""The Ray engine of `BatchScorer`: the same per-file job spread over a Ray cluster.

A pool of actors, one per CPU, each holding one onnxruntime session, scores one file per call;
`ActorPool.map` hands a file to whichever actor is free and yields results in input order, so
they go through the same writer as the local engine and both outputs are identical. On a
cluster (`ray_address`) the files must be readable at the same paths on every node.

Plain actors rather than Ray Data: Ray Data's actor pool logs an error-level line on every
successful run (ray-project/ray#57733) and the option that avoids it is deprecated.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from winnow.batch.score import FileScores, ScoreConfig, load_classifier, score_file, token_counter

# Ray's own loggers at warning level: its info lines (cluster start, shutdown) never show on a
# successful run, its warnings and errors do. The token-auth note only says that the local
# cluster started for this job has a token; it is dropped too.
_LOG_LEVELS = {
    "ray": logging.WARNING,
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
}


class _FileScorer:
    """Ray actor: loads the classifier once, then scores one file per call."""

    def __init__(self, model: str | None):
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one actor per CPU, as local workers
        self.clf = load_classifier(model)
        self.count = token_counter()

    def score(self, path: str) -> FileScores:
        return score_file(path, self.clf, self.count)


def run_ray(files: Sequence[Path], config: ScoreConfig) -> Iterator[FileScores]:
    """Score `files` on Ray (a local one unless `config.ray_address`), yielding in input order."""
    import ray
    from ray.util import ActorPool

    for name, level in _LOG_LEVELS.items():
        logging.getLogger(name).setLevel(level)
    started = False
    if not ray.is_initialized():
        kw = {"address": config.ray_address} if config.ray_address else {"num_cpus": os.cpu_count()}
        ray.init(
            **kw,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
        started = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        workers = max(1, min(config.workers or cpus, len(files)))
        actor = ray.remote(num_cpus=1)(_FileScorer)
        pool = ActorPool([actor.remote(config.model) for _ in range(workers)])
        yield from pool.map(lambda a, path: a.score.remote(path), [str(f) for f in files])
    finally:
        if started:
            ray.shutdown()
