"""Rebuild the shipped default model end to end from transcripts.

    python -m winnow.training.release            # ../shared/traces + data/labels -> models/winnow-small
    winnow release --traces DIR --teacher MINILM_DIR -o models/NAME

The n-gram model (default): extract -> label (heuristic, hand labels joined over it) ->
optional teacher (a local sentence encoder, embeddings cached on disk; a head trained on the
hand labels gives soft labels to every unit) -> leave-one-source-out evaluation of the recipe
(its out-of-fold predictions fit the calibration temperature and the must-keep threshold, and
are the model card's figures) -> the model trained on every source -> model directory with
manifest, metrics, model card and checksums. The directory is replaced only when every step
succeeded. `--kind transformer` rebuilds winnow 0.1's transformer the old way (a session
split, scored on its test split).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from winnow.cli import check_inputs, check_output, positive_int, share

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TRACES = REPO.parent / "shared" / "traces"
DEFAULT_LABELS = REPO / "data" / "labels"
DEFAULT_OUTPUT = REPO / "models" / "winnow-small"
DEFAULT_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "winnow" / "teacher"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--traces",
        required=True,
        help="a folder of transcripts to train on (this project's own: ../shared/traces)",
    )
    p.add_argument(
        "--labels",
        nargs="*",
        help=f"hand-label JSONL files (default: every *.jsonl in {DEFAULT_LABELS} but "
        "corrections.jsonl; none: heuristic only)",
    )
    p.add_argument(
        "-o", "--output", default=str(DEFAULT_OUTPUT), help="model directory (default: %(default)s)"
    )
    p.add_argument(
        "--work", help="keep the intermediate Parquet files here (default: a temporary folder)"
    )
    p.add_argument("--epochs", type=positive_int, help="override TrainConfig.epochs")
    p.add_argument("--seed", type=int, default=0, help="first seed (default: %(default)s)")
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        help="n-gram: seeds of the leave-one-source-out run (its figures are their mean); "
        "transformer: train this many and keep the best by validation macro-F1 "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--kind",
        choices=("ngram", "transformer"),
        default="ngram",
        help="which model to build (default: %(default)s)",
    )
    p.add_argument(
        "--teacher",
        metavar="DIR",
        help="a sentence-transformers model folder (e.g. all-MiniLM-L6-v2) whose soft labels "
        "train the n-gram model; loaded from disk only, never from the network",
    )
    p.add_argument(
        "--cache",
        default=str(DEFAULT_CACHE),
        metavar="DIR",
        help="where teacher embeddings are kept between runs (default: %(default)s)",
    )
    p.add_argument(
        "--must-keep-recall",
        type=share,
        default=0.95,
        help="must-keep recall the decision threshold is fitted to on out-of-fold "
        "predictions (default: %(default)s)",
    )
    p.add_argument(
        "--must-keep-rule",
        choices=("mass", "ratio", "role"),
        default="role",
        help="what the threshold is compared with: the summed must-keep probability (mass), "
        "that sum over the likeliest other category's probability (ratio), or the chance that "
        "a unit of its role with that sum is must-keep (role; fitted per role on out-of-fold "
        "predictions) (default: %(default)s)",
    )


def _step(console, name: str, times: dict[str, float]):
    @contextlib.contextmanager
    def timed():
        t0 = time.perf_counter()
        with console.status(name):
            yield
        times[name] = round(time.perf_counter() - t0, 1)
        console.print(f"{name}: {times[name]:.1f} s")

    return timed()


def traces_digest(root: Path) -> str:
    """sha256 over every file under `root` (relative path and content), in path order."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _label_files(args: argparse.Namespace) -> list[str]:
    return (
        # corrections.jsonl is an input of scripts/merge_labels.py, already in gold.jsonl.
        sorted(str(p) for p in DEFAULT_LABELS.glob("*.jsonl") if p.name != "corrections.jsonl")
        if args.labels is None
        else list(args.labels)
    )


def load_corpus(traces: Path, labels: list[str], work: Path, console) -> tuple:
    """Extract and label the transcripts under `traces`: (Corpus, extract report, label
    summary)."""
    import pyarrow.parquet as pq

    from winnow.data.extract import extract
    from winnow.training.corpus import Corpus, label_table

    report = extract([traces], work / "messages.parquet")
    if not report.files:
        return None, report, None
    table, summary = label_table(pq.read_table(work / "messages.parquet"), labels)
    for line in summary.problems[:5]:
        console.print(f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
    if len(summary.problems) > 5:
        console.print(f"[yellow]... {len(summary.problems) - 5} more label problems[/]")
    return Corpus.from_table(table, traces), report, summary


def run(args: argparse.Namespace) -> int:
    teacher = [args.teacher] if getattr(args, "teacher", None) else []
    check_inputs([args.traces, *_label_files(args), *teacher])  # before any work: one line
    check_output(args.output, folder=True)
    if getattr(args, "cache", None):
        check_output(args.cache, folder=True)
    if args.work:
        check_output(args.work, folder=True)
    if not Path(args.traces).is_dir():
        print(f"winnow release: {args.traces}: no such folder of transcripts", file=sys.stderr)
        return 1
    if getattr(args, "kind", "ngram") == "transformer":
        return _run_transformer(args)
    return _run_ngram(args)


def _run_ngram(args: argparse.Namespace) -> int:
    import numpy as np
    from rich.console import Console

    from winnow.classifier.manifest import Calibration, Provenance, exclude_categories
    from winnow.data.schema import CATEGORIES
    from winnow.training.bag_export import code_revision, library_versions, save_bag_model
    from winnow.training.bag_trainer import BagTrainConfig, BagTrainer
    from winnow.training.by_source import (
        BagRecipe,
        Prepared,
        calibrate,
        evaluate_by_source,
        fit_role_scaling,
        fit_temperature,
        fit_threshold,
    )
    from winnow.training.evaluate import probability_metrics

    console = Console(stderr=True)
    traces = Path(args.traces)
    labels = _label_files(args)
    out = Path(args.output)
    times: dict[str, float] = {}
    start = time.perf_counter()
    config = BagTrainConfig(seed=args.seed)
    if args.epochs:
        config.epochs = args.epochs
    with contextlib.ExitStack() as stack:
        work = (
            Path(args.work)
            if args.work
            else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        work.mkdir(parents=True, exist_ok=True)
        with _step(console, "extract and label", times):
            corpus, report, _summary = load_corpus(traces, labels, work, console)
        if corpus is None:
            print(f"winnow release: {traces}: no transcripts read", file=sys.stderr)
            return 1
        data = Prepared(corpus, config.spec)
        console.print(
            f"{len(corpus):,} units from {report.files:,} files, {len(corpus.source_names())} "
            f"sources; {int(corpus.hand.sum()):,} hand-labelled ({len(labels)} label file(s))"
        )
        teacher_info: dict = {}
        if args.teacher:
            from winnow.training.teacher import SentenceEncoder

            with _step(console, "teacher embeddings", times):
                try:
                    encoder = SentenceEncoder(args.teacher, args.cache)
                    data.embeddings = encoder.embed([u.text or "" for u in corpus.units])
                except ValueError as e:
                    print(f"winnow release: {e}", file=sys.stderr)
                    return 1
            where = Path(args.teacher).resolve()
            name = f"{where.parent.name}/{where.name}" if where.name == "model" else where.name
            teacher_info = {"name": name, "files": encoder.files}
        with _step(console, "encode", times):
            data.inputs(True)
            data.inputs(False)
        targets = "teacher" if args.teacher else "gold"
        recipe = BagRecipe("ngram", config, targets=targets)
        seeds = tuple(range(args.seed, args.seed + max(1, args.seeds)))
        with _step(console, "leave-one-source-out", times):
            by_source = evaluate_by_source(
                data,
                [recipe],
                seeds,
                args.must_keep_recall,
                log=console.log,
                must_keep_rule=args.must_keep_rule,
            )
        # Calibration and threshold from every fold's out-of-fold predictions, both views.
        oof_p = np.concatenate(
            [
                p
                for key in ("ngram/batch", "ngram/online")
                for p in by_source.oof[key][seeds[0]].values()
            ]
        )
        oof_g = np.concatenate(
            [by_source.gold[s] for s in by_source.oof["ngram/batch"][seeds[0]]] * 2
        )
        src, hand = np.array(corpus.sources), corpus.hand
        oof_units = [
            corpus.units[i]
            for s in by_source.oof["ngram/batch"][seeds[0]]
            for i in np.flatnonzero((src == s) & hand)
        ] * 2
        oof_roles = [u.role for u in oof_units]
        temperature = fit_temperature(np.log(np.clip(oof_p, 1e-12, 1)), oof_g)
        # as served: the graph's calibrated output, then the categories a unit cannot have
        cal_p = exclude_categories(calibrate(oof_p, temperature), oof_units)
        scaling = fit_role_scaling(cal_p, oof_g, oof_roles) if args.must_keep_rule == "role" else {}
        threshold = fit_threshold(
            cal_p, oof_g, args.must_keep_recall, args.must_keep_rule, oof_roles, scaling
        )
        gold_names = [CATEGORIES[g] for g in oof_g]
        ece_before = probability_metrics(gold_names, oof_p)["ece"]
        ece_after = probability_metrics(gold_names, cal_p)["ece"]
        with _step(console, "train", times):
            everything = np.arange(len(corpus))
            y, w, sure = recipe.training_targets(data, "", everything, args.seed)
            model = BagTrainer(config).fit([data.inputs(True), data.inputs(False)], y, w, sure)
        calibration = Calibration(
            temperature=temperature,
            must_keep_threshold=threshold,
            must_keep_rule=args.must_keep_rule,
            must_keep_scaling=scaling,
            fitted_on=f"leave-one-source-out predictions ({len(oof_g) // 2:,} hand-labelled "
            "units, batch and online views)",
            ece_before=round(ece_before, 4),
            ece_after=round(ece_after, 4),
        )
        provenance = Provenance(
            code_revision=code_revision(REPO),
            traces_digest=traces_digest(traces),
            label_files={Path(p).name: _sha256(Path(p)) for p in labels},
            libraries=library_versions(),
            teacher=teacher_info,
        )
        training = {
            "units": len(corpus),
            "sessions": len({u.session_id for u in corpus.units}),
            "hand_units": int(corpus.hand.sum()),
            "sources": corpus.source_names(),
            "targets": targets,
            "weak_weight": recipe.weak_weight,
            "source": os.path.relpath(traces.resolve(), REPO),
            "config": config.to_dict(),
        }
        by_source_dict = by_source.to_dict() | {"seeds": list(seeds)}
        times["total"] = round(time.perf_counter() - start, 1)
        save_bag_model(
            model,
            out,
            config.spec,
            calibration,
            provenance,
            training,
            metrics={"by_source": by_source_dict, "release_seconds": times},
            name=out.name,
        )
    by_source.print(Console(width=200))
    console.print(
        f"temperature {temperature:.3f} (ECE {ece_before:.3f} -> {ece_after:.3f}), must-keep "
        f"threshold {threshold:.3f}"
    )
    console.print(f"[bold green]wrote[/] {out} in {time.perf_counter() - start:.0f} s ({times})")
    return 0


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_transformer(args: argparse.Namespace) -> int:
    from rich.console import Console

    from winnow.data.dataset import SplitConfig, build_dataset
    from winnow.data.extract import extract
    from winnow.training.config import TrainConfig
    from winnow.training.evaluate import evaluate_model
    from winnow.training.export import quantize_int8, update_metrics
    from winnow.training.trainer import Trainer

    console = Console(stderr=True)
    traces = Path(args.traces)
    labels = _label_files(args)
    out = Path(args.output)
    times: dict[str, float] = {}
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        work = (
            Path(args.work)
            if args.work
            else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        )
        work.mkdir(parents=True, exist_ok=True)
        with _step(console, "extract", times):
            report = extract([traces], work / "messages.parquet")
        if not report.files:
            print(f"winnow release: {traces}: no transcripts read", file=sys.stderr)
            return 1
        with _step(console, "label", times):
            import pyarrow.parquet as pq

            from winnow.training.corpus import label_table

            table, _ = label_table(pq.read_table(work / "messages.parquet"), labels)
            pq.write_table(table, work / "labeled.parquet", compression="zstd")
        with _step(console, "dataset", times):
            # A larger validation split than `winnow dataset`'s default (0.7/0.1/0.2): with
            # ~1,900 hand labels, 10% is ~140 units, too few to pick an epoch or the must-keep
            # bias on. The test split (cut first) stays the same sessions.
            split = SplitConfig(ratios=(0.6, 0.2, 0.2))
            info = build_dataset(work / "labeled.parquet", work / "dataset", split)
        hand = sum(s["hand_labeled_units"] for s in info["splits"].values())
        console.print(
            f"{report.units:,} units from {report.files:,} files; {hand:,} hand-labelled "
            f"({len(labels)} label file(s))"
        )
        t0 = time.perf_counter()
        tried: dict[int, float] = {}
        result = None
        for seed in range(args.seed, args.seed + max(1, args.seeds)):
            config = TrainConfig(seed=seed)
            if args.epochs:
                config.epochs = args.epochs
            candidate = Trainer(config, console=console).fit(work / "dataset")
            tried[seed] = round(candidate.validation["macro_f1"], 4)
            console.print(f"seed {seed}: validation macro-F1 {tried[seed]:.3f}")
            if result is None or candidate.validation["macro_f1"] > result.validation["macro_f1"]:
                result = candidate
        times["train"] = round(time.perf_counter() - t0, 1)
        assert result is not None  # at least one seed ran
        stage = out.with_name(f".{out.name}.release")
        with _step(console, "export", times):
            result.save(
                stage,
                name=out.name,
                extra_training={
                    "source": os.path.relpath(traces.resolve(), REPO),
                    "label_files": [Path(p).name for p in labels],
                    "seeds_validation_macro_f1": tried,
                },
            )
        with _step(console, "evaluate", times):
            test = evaluate_model(stage, work / "dataset", "test")
            test.save_confusion(stage / "confusion.png")
            quant = work / "int8"
            shutil.copytree(stage, quant, dirs_exist_ok=True)
            quantize_int8(stage / "model.onnx", quant / "model.onnx")
            update_metrics(quant, {})
            int8 = evaluate_model(quant, work / "dataset", "test").results["model"]
        model = test.results["model"]
        metrics = {
            "test": {
                **model,
                "gold": test.gold,
                "baselines": {k: v for k, v in test.results.items() if k != "model"},
            },
            "int8_test": {
                "gold": test.gold,
                **{
                    k: int8[k]
                    for k in (
                        "n",
                        "accuracy",
                        "macro_f1",
                        "must_keep_recall",
                        "must_keep_droppable",
                    )
                },
            },
            "release_seconds": {**times, "total": round(time.perf_counter() - start, 1)},
        }
        update_metrics(stage, metrics)
        if out.exists():
            shutil.rmtree(out)
        stage.rename(out)
    test.print(Console())
    console.print(
        f"int8: accuracy {int8['accuracy']:.3f} ({int8['accuracy'] - model['accuracy']:+.3f}), "
        f"macro-F1 {int8['macro_f1']:.3f} ({int8['macro_f1'] - model['macro_f1']:+.3f})"
    )
    console.print(f"[bold green]wrote[/] {out} in {time.perf_counter() - start:.0f} s ({times})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m winnow.training.release", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
