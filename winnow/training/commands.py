"""`winnow train`, `winnow evaluate`, `winnow release` and `winnow classify`.

Light at import: torch and the training code load inside `run`, and `classify` never
touches torch (it runs the ONNX model through winnow.serving).
"""

from __future__ import annotations

import argparse
import sys

from winnow.cli import (
    CommandError,
    check_inputs,
    check_output,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)


def _fail(command: str, message: str) -> int:
    print(f"winnow {command}: {message}", file=sys.stderr)
    return 1


# --- train -----------------------------------------------------------------------------------


def _add_train(p: argparse.ArgumentParser) -> None:
    from winnow.classifier.config import ModelConfig
    from winnow.training.config import TrainConfig

    t, m = TrainConfig(), ModelConfig()
    p.add_argument("data", metavar="DATA_DIR", help="a data set folder from `winnow dataset`")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="model directory to write")
    p.add_argument(
        "--epochs", type=positive_int, default=t.epochs, help="at most (default: %(default)s)"
    )
    p.add_argument(
        "--batch-size", type=positive_int, default=t.batch_size, help="(default: %(default)s)"
    )
    p.add_argument(
        "--lr", type=positive_float, default=t.lr, help="peak learning rate (default: %(default)s)"
    )
    p.add_argument(
        "--heuristic-weight",
        type=non_negative_float,
        default=t.heuristic_weight,
        help="loss weight of heuristic labels; hand labels weigh 1 (default: %(default)s)",
    )
    p.add_argument(
        "--patience", type=non_negative_int, default=t.patience, help="(default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=t.seed, help="(default: %(default)s)")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=t.threads,
        help="torch threads (default: %(default)s)",
    )
    p.add_argument(
        "--max-len",
        type=positive_int,
        default=m.max_len,
        help="tokens per unit (default: %(default)s)",
    )
    p.add_argument("--d-model", type=positive_int, default=m.d_model, help="(default: %(default)s)")
    p.add_argument("--layers", type=positive_int, default=m.n_layers, help="(default: %(default)s)")
    p.add_argument(
        "--vocab-size", type=positive_int, default=m.vocab_size, help="(default: %(default)s)"
    )
    p.add_argument("--name", help="model name in config.json (default: the folder name)")


def _train_config(args: argparse.Namespace):
    from winnow.classifier.config import ModelConfig
    from winnow.training.config import TrainConfig

    model = ModelConfig(
        vocab_size=args.vocab_size, max_len=args.max_len, d_model=args.d_model,
        n_layers=args.layers, d_ff=2 * args.d_model,
    )  # fmt: skip
    return TrainConfig(
        model=model, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        heuristic_weight=args.heuristic_weight, patience=args.patience, seed=args.seed,
        threads=args.threads,
    )  # fmt: skip


def _run_train(args: argparse.Namespace) -> int:
    from rich.console import Console

    from winnow.classifier.config import ModelConfig
    from winnow.classifier.tokenizer import SPECIAL_TOKENS
    from winnow.cli import reject_stdout

    if error := reject_stdout(args.output, "a model is a folder of files"):
        return _fail("train", error)
    heads = ModelConfig().n_heads
    if args.d_model % heads:
        raise CommandError(f"--d-model must be a multiple of the {heads} attention heads")
    if args.vocab_size <= len(SPECIAL_TOKENS):
        raise CommandError(f"--vocab-size must be over the {len(SPECIAL_TOKENS)} special tokens")
    check_inputs([args.data])
    check_output(args.output, folder=True)
    from winnow.training.trainer import Trainer

    console = Console(stderr=True)
    try:
        result = Trainer(_train_config(args), console=console).fit(args.data)
    except ValueError as e:
        return _fail("train", str(e))
    out = result.save(args.output, name=args.name)
    v = result.validation
    console.print(
        f"[bold green]wrote[/] {out}: best epoch {result.best_epoch}; validation ({v['gold']} labels) "
        f"after the must-keep bias ({result.data_summary['must_keep_bias']:+.2f}, which the epoch lines "
        f"do not include): macro-F1 {v['macro_f1']:.3f}, accuracy {v['accuracy']:.3f} "
        f"({result.seconds:.0f} s)",
        highlight=False,
    )
    return 0


# --- evaluate --------------------------------------------------------------------------------


RECIPES = (
    "ngram",
    "ngram-gold",
    "ngram-heuristic",
    "ngram-nocontext",
    "ngram-v2",
    "teacher",
    "transformer",
    "transformer-gold",
    "transformer-teacher",
)


def _add_evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", nargs="?", metavar="MODEL", help="a model directory ('default': the shipped one)"
    )
    p.add_argument(
        "data", nargs="?", metavar="DATA", help="a data set folder or a labelled Parquet file"
    )
    p.add_argument(
        "--split", default="test", help="split of a data set folder (default: %(default)s)"
    )
    p.add_argument(
        "--confusion",
        default="confusion.png",
        metavar="PNG",
        help="confusion matrix image (default: %(default)s)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    g = p.add_argument_group(
        "leave-one-source-out (--by-source): train on every source of --traces but one, score "
        "the held-out source's hand labels, for every source; no MODEL or DATA"
    )
    g.add_argument(
        "--by-source", action="store_true", help="run the leave-one-source-out evaluation"
    )
    g.add_argument("--traces", help="transcripts (default: the release's)")
    g.add_argument(
        "--labels",
        nargs="*",
        help="hand-label JSONL files (default: data/labels/*.jsonl but corrections.jsonl)",
    )
    g.add_argument(
        "--recipes",
        default="ngram,transformer",
        help=f"comma-separated, of {', '.join(RECIPES)} (default: %(default)s; ngram "
        "uses --teacher's soft labels for units without a hand label when given, else hand "
        "labels only; teacher and transformer-teacher need --teacher; -gold: hand labels only, "
        "-heuristic: the heuristic labeller's for the rest)",
    )
    g.add_argument("--teacher", metavar="DIR", help="a local sentence-transformers model folder")
    g.add_argument(
        "--cache", metavar="DIR", help="teacher embeddings cache (default: the release's)"
    )
    g.add_argument("--seeds", default="0", help="comma-separated seeds (default: %(default)s)")
    g.add_argument(
        "--must-keep-recall",
        type=float,
        default=0.95,
        help="recall the must-keep threshold is fitted to (default: %(default)s)",
    )
    g.add_argument(
        "--must-keep-rule",
        choices=("mass", "ratio", "role"),
        default="role",
        help="what the threshold is compared with (see `winnow release`; default: %(default)s)",
    )
    g.add_argument(
        "--compare-rules",
        default=None,
        help="comma-separated must-keep rules also scored on the same predictions (rows "
        "RECIPE/VIEW/RULE), e.g. mass",
    )


def _recipes(names: list[str], teacher: bool):
    from winnow.classifier.ngrams import BagSpec
    from winnow.training.bag_trainer import BagTrainConfig
    from winnow.training.by_source import BagRecipe, TeacherRecipe, TransformerRecipe

    weak = "teacher" if teacher else "gold"
    table = {
        "ngram": lambda: BagRecipe("ngram", targets=weak),
        "ngram-gold": lambda: BagRecipe("ngram-gold", targets="gold"),
        "ngram-heuristic": lambda: BagRecipe("ngram-heuristic", targets="heuristic"),
        "ngram-nocontext": lambda: BagRecipe("ngram-nocontext", targets=weak, context=False),
        # n-gram spec v2 (winnow.classifier.ngrams): shapes, harness headers, prose cues
        "ngram-v2": lambda: BagRecipe(
            "ngram-v2", BagTrainConfig(spec=BagSpec(version=2)), targets=weak
        ),
        "teacher": lambda: TeacherRecipe(),
        "transformer": lambda: TransformerRecipe(),
        "transformer-gold": lambda: TransformerRecipe("transformer-gold", targets="gold"),
        "transformer-teacher": lambda: TransformerRecipe("transformer-teacher", targets="teacher"),
    }
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(
            f"unknown recipe(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}"
        )
    needs = [n for n in names if n in ("teacher", "transformer-teacher")]
    if needs and not teacher:
        raise ValueError(f"the {needs[0]} recipe needs --teacher DIR")
    return [table[n]() for n in names]


def _run_by_source(args: argparse.Namespace) -> int:
    import json
    import tempfile
    from pathlib import Path

    from rich.console import Console

    from winnow.training import release
    from winnow.training.by_source import Prepared, evaluate_by_source

    err = Console(stderr=True)
    try:
        seeds = tuple(int(x) for x in args.seeds.split(","))
        compare = [r.strip() for r in (args.compare_rules or "").split(",") if r.strip()]
        bad = [r for r in compare if r not in ("mass", "ratio", "role")]
        if bad:
            raise ValueError(f"unknown must-keep rule {bad[0]!r}; one of mass, ratio, role")
        recipes = _recipes(
            [r.strip() for r in args.recipes.split(",") if r.strip()], bool(args.teacher)
        )
    except ValueError as e:
        return _fail("evaluate", str(e))
    if not 0 < args.must_keep_recall <= 1:
        return _fail(
            "evaluate", f"--must-keep-recall must be in (0, 1], not {args.must_keep_recall}"
        )
    traces = Path(args.traces) if args.traces else release.DEFAULT_TRACES
    if not traces.is_dir():
        return _fail("evaluate", f"{traces}: no such folder of transcripts")
    labels = release._label_files(args)
    with tempfile.TemporaryDirectory() as tmp:
        corpus, _, _ = release.load_corpus(traces, labels, Path(tmp), err)
    if corpus is None or not corpus.hand.any():
        return _fail("evaluate", f"{traces}: no hand-labelled units to score")
    data = Prepared(corpus)
    if args.teacher:
        from winnow.training.teacher import SentenceEncoder

        try:
            encoder = SentenceEncoder(args.teacher, args.cache or release.DEFAULT_CACHE)
            with err.status("teacher embeddings"):
                data.embeddings = encoder.embed([u.text or "" for u in corpus.units])
        except ValueError as e:
            return _fail("evaluate", str(e))
    report = evaluate_by_source(
        data,
        recipes,
        seeds,
        args.must_keep_recall,
        log=err.log,
        must_keep_rule=args.must_keep_rule,
        compare_rules=compare,
    )
    report.print(Console(width=max(Console().width, 200)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict() | {"seeds": list(seeds)}, f, indent=1)
    return 0


def _run_evaluate(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from winnow.serving.classifier import ModelError
    from winnow.training.evaluate import evaluate_model

    if args.by_source:
        if args.model or args.data:
            return _fail("evaluate", "--by-source trains its own models: give no MODEL or DATA")
        return _run_by_source(args)
    if not args.model or not args.data:
        return _fail("evaluate", "give MODEL and DATA (or --by-source)")
    check_inputs([args.data] + ([] if args.model == "default" else [args.model]))
    check_output(args.confusion)
    if args.json:
        check_output(args.json)
    console = Console()
    try:
        report = evaluate_model(
            None if args.model == "default" else args.model, args.data, args.split
        )
    except (ModelError, ValueError) as e:
        return _fail("evaluate", str(e))
    if report.gold == "hand":
        console.print(f"scored on the {report.n:,} hand-labelled units of {report.split}")
    else:
        console.print(
            f"[yellow]no hand labels in {report.split}: scored against heuristic labels "
            f"({report.n:,} units); the heuristic column agrees with itself by construction[/]"
        )
    report.print(console)
    console.print(f"confusion matrix: {report.save_confusion(args.confusion)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    return 0


# --- release ---------------------------------------------------------------------------------


def _add_release(p: argparse.ArgumentParser) -> None:
    from winnow.training.release import add_arguments

    add_arguments(p)


def _run_release(args: argparse.Namespace) -> int:
    from winnow.cli import reject_stdout
    from winnow.training.release import run

    if error := reject_stdout(args.output, "a model is a folder of files"):
        return _fail("release", error)
    return run(args)


# --- classify --------------------------------------------------------------------------------


def _add_classify(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="FILE", help="transcripts in any supported format")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT.jsonl",
        help="write one JSON record per unit (its fields, category, scores); - for standard "
        "output (default: none, print a summary table)",
    )
    p.add_argument(
        "--show",
        action="store_true",
        help="print one line per unit: id, category, confidence, role/kind, start of the text",
    )
    p.add_argument(
        "--model", metavar="DIR", help="model directory (default: the shipped winnow-small)"
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="ONNX Runtime threads (default: %(default)s)",
    )


def _run_classify(args: argparse.Namespace) -> int:
    import json
    import time
    from collections import Counter

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from winnow.cli import Output, printable
    from winnow.data.readers import ReadReport, read_paths
    from winnow.serving.classifier import ImportanceClassifier, ModelError

    check_inputs(args.paths)
    if args.output:
        check_output(args.output)
    err = Console(stderr=True)
    report = ReadReport()
    units = list(read_paths(args.paths, report))
    for line in report.problems[:20]:
        err.print(f"[yellow]{line}[/]", highlight=False, soft_wrap=True)
    if not units:
        return _fail("classify", "no units read")
    try:
        clf = ImportanceClassifier.load(args.model, threads=args.threads)
    except ModelError as e:
        return _fail("classify", str(e))
    start = time.perf_counter()
    preds = clf.predict(units)
    seconds = time.perf_counter() - start
    # With `-o -` the records own standard output; everything for people goes to stderr.
    console = err if args.output == "-" else Console()
    if args.show:
        for u, p in zip(units, preds):
            what = printable(f"{u.role}/{u.kind}" + (f"/{u.tool_name}" if u.tool_name else ""))
            head = printable(" ".join(u.text.split()))[:100]  # no terminal controls
            console.print(
                f"{escape(printable(u.id))}  [bold]{p.category:<14}[/] {p.confidence:.2f}  "
                f"[dim]{escape(what)}[/]  {escape(head)}",
                highlight=False,
                soft_wrap=True,
            )
    if args.output:
        from winnow.data.writers import RequestsOnce

        requests = RequestsOnce()  # a request's own fields once a session, not on every line
        with Output(args.output) as out:
            with open(out.path, "w", encoding="utf-8", newline="\n") as fh:
                for u, p in zip(units, preds):
                    rec = requests.thin(u.to_dict())
                    rec["category"] = p.category
                    rec["scores"] = {k: round(v, 5) for k, v in p.scores.items()}
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            out.commit()
        where = "standard output" if out.to_stdout else args.output
        err.print(f"[bold green]wrote[/] {where}: {len(units):,} units ({seconds:.2f} s)")
        return 0
    if args.show:
        return 0
    counts = Counter(p.category for p in preds)
    conf: dict[str, float] = {}
    for p in preds:
        conf[p.category] = conf.get(p.category, 0.0) + p.confidence
    t = Table(
        title=f"{len(units):,} units, {len(report.sessions):,} sessions ({clf.info['name']})",
        box=None,
    )
    for col in ("category", "units", "share", "mean confidence"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for c in clf.labels:
        n = counts.get(c, 0)
        t.add_row(c, f"{n:,}", f"{n / len(units):.1%}", f"{conf[c] / n:.2f}" if n else "-")
    console.print(t)
    console.print("[dim]--show: one line per unit; -o FILE: one JSON record per unit[/]")
    return 0


COMMANDS = {
    "train": ("train the importance classifier on a data set folder", _add_train, _run_train),
    "evaluate": (
        "score a model on a labelled split beside the heuristic labeller and a kind/tool rule",
        _add_evaluate,
        _run_evaluate,
    ),
    "release": (
        "rebuild the shipped default model from transcripts end to end",
        _add_release,
        _run_release,
    ),
    "classify": (
        "label every unit of transcripts with its importance category (no torch needed)",
        _add_classify,
        _run_classify,
    ),
}
