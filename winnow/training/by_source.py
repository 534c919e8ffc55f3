"""Leave-one-source-out evaluation: how a recipe does on a project and agent it never saw.

    corpus = Corpus.from_table(labeled_table, traces_root)
    report = evaluate_by_source(corpus, [BagRecipe("ngram"), TransformerRecipe()], seeds=(0, 1))
    report.print()

For every source (trace folder + format), each recipe trains on the other sources (their hand
labels, plus heuristic or teacher labels where the recipe uses them; no unit of the held-out
source, labelled or not) and is scored on the held-out source's hand labels. Calibration
(a temperature) and the must-keep decision threshold of a fold are fitted on the other folds'
out-of-fold predictions, so they too have never seen the held-out source.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from winnow.classifier.bag import BagEncoder
from winnow.classifier.manifest import MUST_KEEP_RULES, exclude_categories
from winnow.classifier.manifest import must_keep_score as _score_rule
from winnow.classifier.ngrams import BagInputs, BagSpec
from winnow.data.cues import Settler
from winnow.data.schema import CATEGORIES, MUST_KEEP, Unit
from winnow.training.corpus import Corpus
from winnow.training.evaluate import (
    classification_metrics,
    must_keep_probability,
    probability_metrics,
)

_KEEP = np.array([c in MUST_KEEP for c in CATEGORIES])
TEMPERATURES = np.exp(np.linspace(math.log(0.3), math.log(5.0), 57))


def fit_temperature(logp: np.ndarray, gold: np.ndarray) -> float:
    """The temperature (grid) minimising the negative log-likelihood of `gold` under
    softmax(log p / T)."""
    best, best_nll = 1.0, float("inf")
    for t in TEMPERATURES:
        z = logp / t
        z = z - z.max(1, keepdims=True)
        nll = float(-(z[np.arange(len(gold)), gold] - np.log(np.exp(z).sum(1))).mean())
        if nll < best_nll:
            best, best_nll = float(t), nll
    return best


def calibrate(probs: np.ndarray, temperature: float) -> np.ndarray:
    z = np.log(np.clip(probs, 1e-12, 1.0)) / temperature
    z -= z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


RULES = MUST_KEEP_RULES
Scaling = dict[str, tuple[float, float]]


def must_keep_score(
    probs: np.ndarray, rule: str = "mass", roles: Any = None, scaling: Scaling | None = None
) -> np.ndarray:
    """How strongly each row leans must-keep (`winnow.classifier.manifest.must_keep_score`:
    "mass", "ratio" or "role", the last with each row's unit role and `fit_role_scaling`)."""
    top_other = probs[:, ~_KEEP].max(1) if rule == "ratio" else None
    return _score_rule(must_keep_probability(probs), top_other, rule, roles, scaling)


def _logistic(x: np.ndarray, y: np.ndarray, prior: float) -> tuple[float, float]:
    """(a, b) of P(y) = sigmoid(a x + b) by Newton's method, with an L2 pull of weight
    `prior` toward (1, 0) (the score left as it is), so that a role with few units stays
    near the plain mass."""
    a, b = 1.0, 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(a * x + b)))
        w = p * (1 - p)
        ga, gb = float(((p - y) * x).sum()) + prior * (a - 1), float((p - y).sum()) + prior * b
        haa, hab, hbb = float((w * x * x).sum()) + prior, float((w * x).sum()), w.sum() + prior
        det = haa * hbb - hab * hab
        da, db = (hbb * ga - hab * gb) / det, (haa * gb - hab * ga) / det
        a, b = a - da, b - db
        if abs(da) + abs(db) < 1e-9:
            break
    return float(a), float(b)


def fit_role_scaling(
    probs: np.ndarray, gold: np.ndarray, roles: Sequence[str] | np.ndarray, prior: float = 10.0
) -> Scaling:
    """Per unit role, the logistic map of logit(summed must-keep probability) to the chance
    that the unit is must-keep (Platt scaling on out-of-fold predictions, `prior`: see
    `_logistic`); "*", fitted on every row, for the roles not seen."""
    mass = np.clip(must_keep_probability(probs), 1e-6, 1 - 1e-6)
    x = np.log(mass / (1 - mass))
    y = _KEEP[gold].astype(np.float64)
    role_of = np.asarray(roles)
    out = {"*": _logistic(x, y, prior)}
    for role in sorted(set(role_of.tolist())):
        m = role_of == role
        out[role] = _logistic(x[m], y[m], prior)
    return {k: (round(a, 6), round(b, 6)) for k, (a, b) in out.items()}


def fit_threshold(
    probs: np.ndarray,
    gold: np.ndarray,
    recall: float,
    rule: str = "mass",
    roles: Any = None,
    scaling: Scaling | None = None,
) -> float:
    """The highest must-keep threshold at which `decide` keeps `recall` of the must-keep units."""
    cap = 1.0 if rule == "ratio" else 0.5
    gold_keep = _KEEP[gold]
    if not gold_keep.any():
        return cap
    p = must_keep_score(probs, rule, roles, scaling)[gold_keep]
    # A unit is called must-keep when argmax says so or its must-keep score >= tau.
    argmax_keep = _KEEP[probs.argmax(1)][gold_keep]
    need = math.ceil(recall * len(p)) - int(argmax_keep.sum())
    if need <= 0:
        return cap
    rest = np.sort(p[~argmax_keep])[::-1]
    return float(min(cap, rest[min(need, len(rest)) - 1]))


def decide(
    probs: np.ndarray,
    threshold: float | None,
    rule: str = "mass",
    settled: np.ndarray | None = None,
    roles: Any = None,
    scaling: Scaling | None = None,
) -> np.ndarray:
    """Category index per row: the argmax, or the likeliest must-keep category when the
    must-keep score (`must_keep_score`) reaches `threshold` (None: plain argmax). Rows where
    `settled` is a category index (units TAXONOMY.md settles outright) take it, as served."""
    pred = probs.argmax(1)
    if threshold is not None:
        keep_idx = np.flatnonzero(_KEEP)
        best_keep = keep_idx[probs[:, keep_idx].argmax(1)]
        score = must_keep_score(probs, rule, roles, scaling)
        flip = (score >= threshold) & ~_KEEP[pred]
        pred = np.where(flip, best_keep, pred)
    if settled is not None:
        pred = np.where(settled >= 0, settled, pred)
    return pred


def settled_categories(units: Sequence[Unit]) -> np.ndarray:
    """Per unit, the category index the served classifier gives whatever its model says, or -1
    (units in session order: a result is settled by its call)."""
    settle = Settler()
    cats = [settle(u) for u in units]
    return np.array([CATEGORIES.index(c) if c else -1 for c in cats], int)


@dataclass
class Prepared:
    """A corpus with what recipes share across folds: encoded inputs, teacher embeddings."""

    corpus: Corpus
    spec: BagSpec = field(default_factory=BagSpec)
    embeddings: np.ndarray | None = None  # [N, dim] teacher encoder, when given
    _inputs: dict[tuple[bool, bool, BagSpec], BagInputs] = field(default_factory=dict)
    _teacher: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    def inputs(self, online: bool, context: bool = True, spec: BagSpec | None = None) -> BagInputs:
        """The encoded corpus in one view (`spec`: how to hash it, default `self.spec`)."""
        spec = spec or self.spec
        key = (online, context, spec)
        if key not in self._inputs:
            self._inputs[key] = BagEncoder(spec).encode(self.corpus.units, online, context)
        return self._inputs[key]

    def teacher_probs(self, held_out: str, train: np.ndarray, seed: int) -> np.ndarray:
        """The teacher's probabilities for every unit, its head fitted on the hand labels
        of `train` (cached per fold)."""
        from winnow.training.teacher import TeacherHead

        key = (held_out, seed)
        if key not in self._teacher:
            if self.embeddings is None:
                raise ValueError("a teacher recipe needs teacher embeddings")
            x = TeacherHead.matrix(self.embeddings, self.inputs(False).dense, self.corpus.units)
            rows = train[self.corpus.hand[train]]
            head = TeacherHead.fit(x[rows], self.corpus.labels[rows], seed=seed)
            self._teacher[key] = head.predict_proba(x)
        return self._teacher[key]


class Recipe(Protocol):
    """A way to train a classifier: fit on `train` rows, predict `test` rows ({view: probs})."""

    name: str
    threshold: bool  # whether its decision uses a must-keep threshold fitted out of fold

    def fit_predict(
        self, data: Prepared, held_out: str, train: np.ndarray, test: np.ndarray, seed: int
    ) -> dict[str, np.ndarray]: ...


@dataclass
class BagRecipe:
    """The n-gram classifier. `targets`: what labels the units without a hand label get:
    "gold" (none: hand labels only), "heuristic" (the labeller's, at `weak_weight`) or
    "teacher" (the teacher's probabilities, at `weak_weight`)."""

    name: str = "ngram"
    config: Any = None  # BagTrainConfig
    targets: str = "teacher"
    context: bool = True
    weak_weight: float = 0.5
    threshold: bool = True

    def training_targets(
        self, data: Prepared, held_out: str, train: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(targets [N, labels], loss weights [N], sure [N]) for every unit of the corpus.
        Sure units (hand labels, and the heuristic labels a tier-3 rule settled: a
        housekeeping command, an empty result, a failed call, facts TAXONOMY.md states
        outright) learn their label at full weight every epoch; the others learn the
        teacher's probabilities or the heuristic label at `weak_weight`, or nothing."""
        from winnow.data.labeling import LFS

        c = data.corpus
        rules = {f"lf:{f.name}" for f in LFS if f.tier == 3}
        sure = c.hand | np.array([s in rules for s in c.label_source], bool)
        targets = c.one_hot()
        weights = np.where(sure, 1.0, 0.0 if self.targets == "gold" else self.weak_weight)
        if self.targets == "teacher":
            soft = data.teacher_probs(held_out, train, seed)
            targets = np.where(sure[:, None], targets, soft)
        return targets.astype(np.float32), weights.astype(np.float32), sure

    def fit_predict(self, data, held_out, train, test, seed):
        from winnow.training.bag_trainer import BagTrainConfig, BagTrainer, predict_logits, softmax

        config = replace(self.config or BagTrainConfig(spec=data.spec), seed=seed)
        targets, weights, sure = self.training_targets(data, held_out, train, seed)
        rows = train[weights[train] > 0]
        views = (True, False)
        inputs = [data.inputs(v, self.context, config.spec).subset(rows) for v in views]
        model = BagTrainer(config).fit(inputs, targets[rows], weights[rows], sure[rows])
        return {
            ("online" if v else "batch"): softmax(
                predict_logits(model, data.inputs(v, self.context, config.spec).subset(test))
            )
            for v in views
        }


@dataclass
class TeacherRecipe:
    """The teacher alone (frozen sentence encoder + a head trained on hand labels)."""

    name: str = "teacher"
    threshold: bool = True

    def fit_predict(self, data, held_out, train, test, seed):
        return {"batch": data.teacher_probs(held_out, train, seed)[test]}


@dataclass
class TransformerRecipe:
    """The winnow-small recipe: `Trainer` on a 60/20 session split of the training sources
    (the release's data set ratios), its own must-keep bias. `targets`: what the units without
    a hand label learn, as for `BagRecipe`: "heuristic" (the labeller's label at the Trainer's
    `heuristic_weight`, 0.3: the release's recipe), "gold" (nothing: hand labels and the
    tier-3 rules' only) or "teacher" (the teacher's probabilities as soft targets, at
    `heuristic_weight`). Predicts the batch view (both neighbours) and the online view (the
    unit is the latest of its session)."""

    name: str = "transformer"
    targets: str = "heuristic"
    threshold: bool = False
    epochs: int | None = None
    config: Any = None  # TrainConfig

    def training_rows(
        self, data: Prepared, held_out: str, train: np.ndarray, seed: int
    ) -> list[dict[str, Any]]:
        """The `train` units as data set rows: category, hand_label, label_source, and for
        "teacher" a `soft_target` on every unit a hand label or tier-3 rule did not settle."""
        if self.targets not in TARGETS:
            raise ValueError(f"unknown targets {self.targets!r}; one of {', '.join(TARGETS)}")
        from winnow.data.labeling import LFS

        c = data.corpus
        rules = {f"lf:{f.name}" for f in LFS if f.tier == 3}
        soft = data.teacher_probs(held_out, train, seed) if self.targets == "teacher" else None
        rows = []
        for i in train:
            r = _row(c, int(i))
            r["hand_label"] = bool(c.hand[i])
            r["label_source"] = c.label_source[i]
            if soft is not None and not (c.hand[i] or c.label_source[i] in rules):
                r["soft_target"] = [float(p) for p in soft[i]]
                r["category"] = CATEGORIES[int(soft[i].argmax())]
            rows.append(r)
        return rows

    def fit_predict(self, data, held_out, train, test, seed):
        import random
        import tempfile
        from pathlib import Path

        import pyarrow as pa
        from rich.console import Console

        from winnow.data.dataset import SplitConfig, build_dataset
        from winnow.training.bag_trainer import softmax
        from winnow.training.config import TrainConfig
        from winnow.training.trainer import Trainer, _encode, predict_logits

        config = replace(self.config or TrainConfig(), seed=seed)
        if self.epochs:
            config.epochs = self.epochs
        if self.targets == "gold":
            config.heuristic_weight = 0.0
        table = pa.Table.from_pylist(self.training_rows(data, held_out, train, seed))
        with tempfile.TemporaryDirectory() as tmp:
            build_dataset(table, Path(tmp) / "ds", SplitConfig(ratios=(0.6, 0.2, 0.2)))
            result = Trainer(config, console=Console(quiet=True)).fit(Path(tmp) / "ds")
        # The held-out units in their sessions, so each sees its real neighbours as context.
        c = data.corpus
        sessions = {c.units[i].session_id for i in test}
        rows_at = [i for i, u in enumerate(c.units) if u.session_id in sessions]
        at = {i: j for j, i in enumerate(rows_at)}
        pick = np.array([at[int(i)] for i in test])
        rows = [_row(c, i) for i in rows_at]
        out = {}
        for view, live in (("batch", 0.0), ("online", 1.0)):
            enc = _encode(rows, result.encoder, 1.0, live, random.Random(0))
            out[view] = softmax(predict_logits(result.model, enc.subset(pick)))
        return out


TARGETS = ("heuristic", "gold", "teacher")


def _row(c: Corpus, i: int) -> dict[str, Any]:
    """Unit `i` as a flat data set row with its category."""
    r = c.units[i].to_dict()
    r["category"] = CATEGORIES[c.labels[i]]
    return {k: v for k, v in r.items() if k != "raw" and not isinstance(v, dict | list)}


@dataclass
class BySourceReport:
    """Per recipe and view: per-source figures (mean over seeds), their mean, seed spread."""

    sources: list[str]
    counts: dict[str, int]
    results: dict[str, dict[str, dict[str, float]]]  # "recipe/view" -> source|"mean" -> metrics
    spread: dict[str, dict[str, float]]  # "recipe/view" -> metric -> std over seeds of the mean
    temperatures: dict[str, float]  # "recipe/view" -> temperature fitted on all OOF preds
    thresholds: dict[str, float]
    seconds: float = 0.0
    # out-of-fold probabilities: "recipe/view" -> seed -> source -> [held-out units, labels]
    oof: dict[str, dict[int, dict[str, np.ndarray]]] = field(default_factory=dict)
    gold: dict[str, np.ndarray] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "counts": self.counts,
            "results": self.results,
            "spread": self.spread,
            "temperatures": self.temperatures,
            "thresholds": self.thresholds,
            "seconds": round(self.seconds, 1),
        }

    def print(self, console=None, metrics: Sequence[str] = ()) -> None:
        from rich.console import Console
        from rich.table import Table

        console = console or Console()
        metrics = tuple(metrics) or TABLE_METRICS
        for name, per in self.results.items():
            t = Table(title=f"{name}: leave-one-source-out", box=None, header_style="bold")
            t.add_column("held-out source")
            t.add_column("units", justify="right")
            for m in metrics:
                t.add_column(SHORT.get(m, m), justify="right")
            for src in [*self.sources, "mean"]:
                r = per[src]
                cells = [_fmt(m, r.get(m, float("nan"))) for m in metrics]
                if src == "mean":
                    sp = self.spread.get(name, {})
                    cells = [
                        f"{c} ±{sp[m]:.3f}" if sp.get(m, 0) > 0 else c
                        for c, m in zip(cells, metrics)
                    ]
                t.add_row(src, str(self.counts.get(src, sum(self.counts.values()))), *cells)
            console.print(t)


TABLE_METRICS = (
    "accuracy",
    "macro_f1",
    "must_keep_recall",
    "must_keep_droppable",
    "must_keep_auc",
    "must_keep_ap",
    "must_keep_recall_at_5fk",
    "must_keep_recall_at_10fk",
    "ece_raw",
    "ece",
    "must_keep_ece",
)
SHORT = {
    "accuracy": "acc",
    "macro_f1": "macro-F1",
    "must_keep_recall": "mk recall",
    "must_keep_droppable": "mk->drop",
    "must_keep_auc": "mk AUC",
    "must_keep_ap": "mk AP",
    "must_keep_recall_at_5fk": "mk R@5%",
    "must_keep_recall_at_10fk": "mk R@10%",
    "ece_raw": "ECE raw",
    "ece": "ECE cal",
    "must_keep_ece": "mk ECE",
}


def _fmt(metric: str, v: float) -> str:
    if v != v:
        return "-"
    return f"{v:.1%}" if metric == "must_keep_droppable" else f"{v:.3f}"


def _score(
    gold: np.ndarray,
    probs: np.ndarray,
    threshold: float | None,
    rule: str = "mass",
    settled: np.ndarray | None = None,
    roles: Any = None,
    scaling: Scaling | None = None,
) -> dict[str, float]:
    gold_names = [CATEGORIES[g] for g in gold]
    pred = [CATEGORIES[p] for p in decide(probs, threshold, rule, settled, roles, scaling)]
    m = classification_metrics(gold_names, pred)
    out = {k: m[k] for k in ("accuracy", "macro_f1", "must_keep_recall", "must_keep_droppable")}
    return out | probability_metrics(gold_names, probs)


def evaluate_by_source(
    corpus: Corpus | Prepared,
    recipes: Sequence[Recipe],
    seeds: Sequence[int] = (0,),
    must_keep_recall: float = 0.97,
    sources: Sequence[str] | None = None,
    must_keep_rule: str = "mass",
    log: Callable[[str], None] = lambda s: None,
    compare_rules: Sequence[str] = (),
) -> BySourceReport:
    """Train each recipe once per held-out source and seed; score the held-out hand labels.
    Rows `recipe/view` take the `must_keep_rule` decision, `recipe/view/argmax` the most
    probable category, `recipe/view/RULE` the decision of each of `compare_rules` (same
    predictions)."""
    start = time.perf_counter()
    data = corpus if isinstance(corpus, Prepared) else Prepared(corpus)
    c = data.corpus
    names = list(sources or c.source_names())
    src = np.array(c.sources)
    folds = {s: (np.flatnonzero(src != s), np.flatnonzero((src == s) & c.hand)) for s in names}
    folds = {s: f for s, f in folds.items() if len(f[1])}
    names = list(folds)
    # oof[key][seed][source] = probs of the held-out hand-labelled units
    oof: dict[str, dict[int, dict[str, np.ndarray]]] = {}
    thresholded: dict[str, bool] = {}
    for recipe in recipes:
        for seed in seeds:
            for s, (train, test) in folds.items():
                t0 = time.perf_counter()
                out = recipe.fit_predict(data, s, train, test, seed)
                for view, probs in out.items():
                    key = f"{recipe.name}/{view}"
                    thresholded[key] = recipe.threshold
                    oof.setdefault(key, {}).setdefault(seed, {})[s] = probs
                log(f"{recipe.name} seed {seed} held out {s}: {time.perf_counter() - t0:.1f} s")
    gold = {s: c.labels[test] for s, (_, test) in folds.items()}
    every = settled_categories(c.units)
    settled = {s: every[test] for s, (_, test) in folds.items()}
    roles = {s: np.array([c.units[i].role for i in test]) for s, (_, test) in folds.items()}
    held = {s: [c.units[i] for i in test] for s, (_, test) in folds.items()}

    def served(probs: np.ndarray, t: float, of: Sequence[str]) -> np.ndarray:
        """As the model serves them: calibrated (its graph's output), then the categories
        TAXONOMY.md rules out for a unit taken away (which keeps the must-keep mass)."""
        return exclude_categories(calibrate(probs, t), [u for s in of for u in held[s]])

    results: dict[str, dict[str, dict[str, float]]] = {}
    spread: dict[str, dict[str, float]] = {}
    temps: dict[str, float] = {}
    thresholds: dict[str, float] = {}
    rules = [
        (key, by_seed, rule)
        for key, by_seed in oof.items()
        for rule in (
            (must_keep_rule, None, *[r for r in compare_rules if r != must_keep_rule])
            if thresholded[key]
            else (None,)
        )
    ]
    for key, by_seed, rule in rules:
        decided = rule is not None
        name = (
            key if rule == must_keep_rule or not thresholded[key] else f"{key}/{rule or 'argmax'}"
        )
        per_seed: list[dict[str, dict[str, float]]] = []
        for _seed, by_src in by_seed.items():
            scores: dict[str, dict[str, float]] = {}
            for s in names:
                others = [o for o in names if o != s]
                p_o = np.concatenate([by_src[o] for o in others])
                g_o = np.concatenate([gold[o] for o in others])
                t = fit_temperature(np.log(np.clip(p_o, 1e-12, 1)), g_o)
                cal = served(by_src[s], t, [s])
                tau, scaling = None, None
                if rule is not None:
                    cal_o = served(p_o, t, others)
                    r_o = np.concatenate([roles[o] for o in others])
                    if rule == "role":
                        scaling = fit_role_scaling(cal_o, g_o, r_o)
                    tau = fit_threshold(cal_o, g_o, must_keep_recall, rule, r_o, scaling)
                m = _score(gold[s], cal, tau, rule or "mass", settled[s], roles[s], scaling)
                m["ece_raw"] = probability_metrics([CATEGORIES[g] for g in gold[s]], by_src[s])[
                    "ece"
                ]
                scores[s] = m
            per_seed.append(scores)
        metric_names = list(per_seed[0][names[0]])
        res = {
            s: {m: float(np.nanmean([ps[s][m] for ps in per_seed])) for m in metric_names}
            for s in names
        }
        means = [
            {m: float(np.nanmean([ps[s][m] for s in names])) for m in metric_names}
            for ps in per_seed
        ]
        res["mean"] = {m: float(np.mean([x[m] for x in means])) for m in metric_names}
        results[name] = res
        spread[name] = {m: float(np.std([x[m] for x in means])) for m in metric_names}
        all_p = np.concatenate([by_seed[seeds[0]][s] for s in names])
        all_g = np.concatenate([gold[s] for s in names])
        temps[key] = fit_temperature(np.log(np.clip(all_p, 1e-12, 1)), all_g)
        if decided and rule == must_keep_rule:
            all_cal = served(all_p, temps[key], names)
            all_r = np.concatenate([roles[s] for s in names])
            scaling = fit_role_scaling(all_cal, all_g, all_r) if rule == "role" else None
            thresholds[key] = fit_threshold(
                all_cal, all_g, must_keep_recall, must_keep_rule, all_r, scaling
            )
    return BySourceReport(
        names,
        {s: len(f[1]) for s, f in folds.items()},
        results,
        spread,
        temps,
        thresholds,
        time.perf_counter() - start,
        oof,
        gold,
    )


__all__ = [
    "BagRecipe",
    "BySourceReport",
    "Prepared",
    "Recipe",
    "TeacherRecipe",
    "TransformerRecipe",
    "calibrate",
    "decide",
    "evaluate_by_source",
    "fit_role_scaling",
    "fit_temperature",
    "fit_threshold",
]
