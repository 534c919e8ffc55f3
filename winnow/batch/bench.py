"""Benchmarks (placeholder while being written)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true")


def run(args: argparse.Namespace) -> int:
    return 0
