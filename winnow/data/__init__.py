"""Transcripts in, normalized units out, labelled by category, split into a data set."""

from winnow.data.readers import ReadReport, detect_format, parse, read_file, read_paths
from winnow.data.schema import CATEGORIES, DEFAULT_STRATEGIES, DROPPABLE, MUST_KEEP, Unit, as_unit

__all__ = [
    "CATEGORIES",
    "DEFAULT_STRATEGIES",
    "DROPPABLE",
    "MUST_KEEP",
    "ReadReport",
    "Unit",
    "as_unit",
    "detect_format",
    "parse",
    "read_file",
    "read_paths",
]
