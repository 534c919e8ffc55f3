"""The context-intelligence benchmark (CIB): does quality fall with occupancy, or with
interference, and does compression win it back?

    from winnow.batch.cib import Benchmark, CIBConfig
    summary = Benchmark(CIBConfig(base_url="http://localhost:8000/v1", model="m")).run("out/cib")

The same multi-hop questions are asked with the window filled to each bucket by irrelevant
filler or by competing distractors, and with the distractor context compressed to a small
budget by winnow, oldest-first truncation and observation masking. `winnow cib` is the command.
Names resolve lazily: importing this package loads neither openai nor matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Benchmark": "winnow.batch.cib.runner",
    "CIBConfig": "winnow.batch.cib.runner",
    "RunSummary": "winnow.batch.cib.runner",
    "ContextBuilder": "winnow.batch.cib.context",
    "Probe": "winnow.batch.cib.probes",
    "generate_probes": "winnow.batch.cib.probes",
    "load_probes": "winnow.batch.cib.probes",
    "filler_text": "winnow.batch.cib.probes",
    "f1": "winnow.batch.cib.metrics",
    "exact_match": "winnow.batch.cib.metrics",
    "bootstrap_ci": "winnow.batch.cib.metrics",
    "summarize": "winnow.batch.cib.report",
    "write_report": "winnow.batch.cib.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'winnow.batch.cib' has no attribute {name!r}")
