"""The linear-time rewrites of the text cues change no output: old code vs this checkout.

    .venv/bin/python scripts/compare_text_cues.py [--ref 64fead8] [PATH ...]

Loads `winnow/data/cues.py`, `winnow/data/labeling.py` and `winnow/classifier/features.py` as
they were at `--ref` (git show; default: the last commit before the rewrites) beside the
current ones, reads every unit of PATH (default: ../shared/traces and tests/fixtures), and
compares unit by unit: every public cue function of `cues` on the unit's text (and on the
shell command of tool calls, and on `--fuzz` random texts made of the rewritten patterns'
pieces), the commit message rule of the labeller on the same texts, the labeller's category, deciding LF and votes per session,
and the feature matrix bit for bit. Prints the counts and every difference; exit 1 if any.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from winnow.classifier import features as new_features  # noqa: E402
from winnow.data import cues as new_cues  # noqa: E402
from winnow.data import labeling as new_labeling  # noqa: E402
from winnow.data.readers import ReadReport, read_paths  # noqa: E402

BEFORE = "64fead8"  # main before the rewrites (issue 14)
FILES = {
    "cues": "winnow/data/cues.py",
    "labeling": "winnow/data/labeling.py",
    "features": "winnow/classifier/features.py",
}
# Public functions of cues over one string; each is compared on every text.
TEXT_FUNCTIONS = [
    name
    for name, fn in vars(new_cues).items()
    if callable(fn)
    and not name.startswith("_")
    and getattr(fn, "__module__", "") == new_cues.__name__
    and name not in ("cue_vector", "tool_class", "is_housekeeping_command")
]


def old_modules(ref: str) -> dict[str, types.ModuleType]:
    """The three modules as they were at `ref`, each importing the old cues."""
    mods: dict[str, types.ModuleType] = {}
    for key in ("cues", "labeling", "features"):
        source = subprocess.run(
            ["git", "show", f"{ref}:{FILES[key]}"], cwd=ROOT, capture_output=True, text=True
        )
        if source.returncode:
            sys.exit(f"compare_text_cues: cannot read {FILES[key]} at {ref}: {source.stderr}")
        text = source.stdout.replace("from winnow.data import cues\n", "import _old_cues as cues\n")
        mod = types.ModuleType(f"_old_{key}")
        mod.__file__ = f"{ref}:{FILES[key]}"
        sys.modules[mod.__name__] = mod
        exec(compile(text, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - our own history
        mods[key] = mod
    return mods


# Pieces of the patterns rewritten, for random texts that reach their corners
PIECES = (
    "\n", "\n", " ", " ", "\t", "  ", ".", "(", ")", "()", ";", "{", "}", "->", ":", "a", "Z", "_",
    "1", "é", "\u2028", "\x85", "\r", "def ", "return ", "  x = f(a);", "12→", "@dec", "});",
    "Error:", "a.b.ValueError: ", "Exception:", "i've added", "we've fixed", "perfect! ",
    "## Summary", "git commit", "git -C repo commit", " -m ", "-m", "'msg'", "<command-name>/x",
    "</command-name>", "<command-args>", "</command-args>", "(Y)es/(N)o", "]: ", "y", "foo.bar",
    "pkg.fn", "x1", ".a", "a.", "1.a",
)  # fmt: skip


def fuzz_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(PIECES, size=rng.integers(1, 40))) for _ in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="transcripts or folders")
    parser.add_argument("--ref", default=BEFORE, help="git revision of the old code")
    parser.add_argument("--fuzz", type=int, default=20000, help="random texts compared too")
    args = parser.parse_args()
    paths = args.paths or [
        p for p in (ROOT.parent / "shared" / "traces", ROOT / "tests" / "fixtures") if p.exists()
    ]
    old = old_modules(args.ref)
    units = list(read_paths(paths, ReadReport()))
    print(f"{len(units):,} units from {', '.join(map(str, paths))}; old code at {args.ref}")
    diffs: list[str] = []
    texts = [u.text for u in units]
    texts += [new_labeling.shell_command(u) for u in units if u.kind == "tool_call"]
    texts += fuzz_texts(args.fuzz)
    t_old = t_new = 0.0
    for name in TEXT_FUNCTIONS:
        new_fn, old_fn = getattr(new_cues, name), getattr(old["cues"], name, None)
        if old_fn is None:
            continue
        for text in texts:
            t0 = time.perf_counter()
            a = old_fn(text)
            t1 = time.perf_counter()
            b = new_fn(text)
            t_old, t_new = t_old + t1 - t0, t_new + time.perf_counter() - t1
            if a != b:
                diffs.append(f"cues.{name}({text[:60]!r}...): old {a!r}, new {b!r}")
    commits = 0
    for text in texts:  # the commit message rule, on the shell commands and the random texts
        unit = new_labeling.Unit("c", "s", 0, "assistant", "tool_call", text, tool_name="Bash")
        a, b = old["labeling"]._commit_message(unit), new_labeling._commit_message(unit)
        commits += a is not None
        if a != b:
            diffs.append(f"_commit_message({text[:60]!r}): old {a!r}, new {b!r}")
    print(f"cues: {len(TEXT_FUNCTIONS)} functions x {len(texts):,} texts, {args.fuzz:,} random "
          f"({t_old:.1f} s old, {t_new:.1f} s new)")  # fmt: skip

    sessions: dict[str, list] = defaultdict(list)
    for u in units:
        sessions[u.session_id].append(u)
    n = 0
    for group in sessions.values():
        a = old["labeling"].Labeler().label(group)
        b = new_labeling.Labeler().label(group)
        for x, y in zip(a, b, strict=True):
            n += 1
            if (x.category, x.label_source, x.votes) != (y.category, y.label_source, y.votes):
                diffs.append(f"label {x.unit.id}: old {x.category}/{x.label_source}, "
                             f"new {y.category}/{y.label_source}")  # fmt: skip
    print(f"labeller: {n:,} units in {len(sessions):,} sessions; commit messages: {commits:,}")
    a = old["features"].batch_features(units)
    b = new_features.batch_features(units)
    if a.shape != b.shape or not np.array_equal(a, b):
        rows = np.flatnonzero((a != b).any(axis=1)) if a.shape == b.shape else []
        diffs.append(f"features differ ({len(rows)} rows, first {list(rows[:5])})")
    print(f"features: {a.shape[0]:,} x {a.shape[1]} matrix")
    for d in diffs[:50]:
        print("DIFF", d)
    print(f"{len(diffs)} differences" if diffs else "identical")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
