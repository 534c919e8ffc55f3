"""Labelled units of a folder of transcripts, grouped by source, ready for training.

    table = label_table(extract_table, label_files)             # heuristic + hand labels
    corpus = Corpus.from_table(table, traces_root)               # Units, labels, sources

A source is a trace folder and a transcript format (`entireio-cli/claude_code`): one project
and one agent, the unit of leave-one-source-out evaluation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from winnow.data.labeling import LABEL_COLUMNS, with_label_columns
from winnow.data.schema import CATEGORIES, CATEGORY_INDEX, Unit


@dataclass
class LabelSummary:
    """What `label_table` did: hand labels joined and the problems met on the way."""

    joined: int
    problems: list[str]
    analysis: Any  # winnow.data.labeling.LFAnalysis
    unknown: int = 0  # ids of the label files that name no unit given (labels of other data)


def label_units(units: Sequence[Unit], label_files: Sequence[str | Path] = ()):
    """Label `units` with the heuristic labeller and join hand labels over it; returns
    (labeled units, LabelSummary)."""
    from winnow.data.labeling import Labeler, LFAnalysis, apply_labels, load_labels

    labeled = Labeler().label(list(units))
    joined, problems, unknown = 0, [], 0
    if label_files:
        join = load_labels([str(p) for p in label_files], known_ids={lu.unit.id for lu in labeled})
        problems = join.problems + join.disagreements
        joined = apply_labels(labeled, join.labels)
        unknown = sum(join.unknown.values())
    return labeled, LabelSummary(joined, problems, LFAnalysis.from_labeled(labeled), unknown)


def table_units(table: pa.Table) -> list[Unit]:
    """The units of a table from `winnow extract` (extras restored), in row order."""
    out = []
    for r in table.drop_columns([c for c in LABEL_COLUMNS if c in table.column_names]).to_pylist():
        extra = r.pop("extra", None)
        if extra:
            r.update({k: v for k, v in json.loads(extra).items() if k not in r})
        out.append(Unit.from_dict(r))
    return out


def label_table(
    table: pa.Table, label_files: Sequence[str | Path] = ()
) -> tuple[pa.Table, LabelSummary]:
    """A table of units from `winnow extract` with the label columns added (replaced)."""
    labeled, summary = label_units(list(table_units(table)), label_files)
    return with_label_columns(table, labeled), summary


def source_key(path: str | None, fmt: str | None, root: str | Path | None) -> str:
    """`<first folder under root>/<format>`; the file's parent folder when not under root."""
    p = Path(path or "")
    top = p.parent.name
    if root is not None:
        try:
            top = p.resolve().relative_to(Path(root).resolve()).parts[0]
        except (ValueError, IndexError):
            pass
    return f"{top}/{fmt or '?'}"


@dataclass
class Corpus:
    """Units in session order with their label, whether it is a hand label, and their source."""

    units: list[Unit]
    labels: np.ndarray  # int64 index into CATEGORIES
    hand: np.ndarray  # bool
    label_source: list[str]
    sources: list[str]

    def __len__(self) -> int:
        return len(self.units)

    @classmethod
    def from_table(cls, table: pa.Table, root: str | Path | None = None) -> Corpus:
        units, labels, hand, lsrc, sources = [], [], [], [], []
        for r in table.to_pylist():
            extra = r.pop("extra", None)
            if extra:
                r.update({k: v for k, v in json.loads(extra).items() if k not in r})
            labels.append(CATEGORY_INDEX[r.pop("category")])
            hand.append(bool(r.pop("hand_label", False)))
            lsrc.append(r.pop("label_source", "") or "")
            r.pop("label_votes", None)
            sources.append(source_key(r.get("source"), r.get("format"), root))
            units.append(Unit.from_dict(r))
        return cls(units, np.array(labels, np.int64), np.array(hand, bool), lsrc, sources)

    def source_names(self) -> list[str]:
        return sorted(set(self.sources))

    def mask(self, source: str) -> np.ndarray:
        return np.array([s == source for s in self.sources])

    def one_hot(self) -> np.ndarray:
        out = np.zeros((len(self), len(CATEGORIES)), np.float32)
        out[np.arange(len(self)), self.labels] = 1.0
        return out


__all__ = ["Corpus", "LabelSummary", "label_table", "label_units", "source_key", "table_units"]
