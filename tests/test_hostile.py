"""Hostile texts: the labeller, the features and the compressor stay linear in the text's length.

Each hostile text is put into a six-unit session (user, assistant, thinking, a Bash call
that carries it as its command, the call's result, a call whose input is the text itself) at n and at 4n characters a unit. The
time at 4n must be under `RATIO` times the time at n (linear is 4; the regexes this guards
against grow 16x), and under a time budget per KB generous enough for a loaded 2-core CI
machine. Times are the thread's CPU time, the best of three: other processes on the machine
do not count. `scripts/bench_hostile.py` prints the same figures beside the old code's.
"""

from __future__ import annotations

import json
import time

import pytest

from winnow.classifier.features import batch_features
from winnow.data.labeling import Labeler
from winnow.data.schema import Unit
from winnow.serving.compressor import CompressorConfig, SemanticCompressor
from winnow.serving.tokens import HeuristicCounter

N = 4_000  # characters a unit; the second size is 4N
RATIO = 10.0  # t(4n) / t(n): linear 4, quadratic 16
BUDGET_MS_PER_KB = {"labeller": 5.0, "features": 2.0, "compressor": 10.0}
NOISE_MS = 20.0  # below this at 4n, the ratio says nothing

HOSTILE = {
    "one character": lambda n: "a" * n,
    "newlines": lambda n: "\n" * n,
    "spaces": lambda n: " " * n,
    "blank lines": lambda n: " \n" * (n // 2),
    "indented lines": lambda n: ("\n" + " " * 30) * (n // 31),
    "backticks": lambda n: "`" * n,
    "nested brackets": lambda n: "(" * (n // 2) + ")" * (n // 2),
    "nested JSON": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "combining marks": lambda n: "e" + "\u0301" * (n - 1),
    "line separators": lambda n: "\u2028\x85\r" * (n // 3),
    "dotted names": lambda n: "e." * (n // 2),
    "code closers": lambda n: "});\n" * (n // 4),
    "command args": lambda n: "<command-name>/x</command-name>" + "<command-args>" * (n // 14),
    "git commits": lambda n: "git commit " * (n // 11),
    "error words": lambda n: "a.b.c" * (n // 5),
    "prompts": lambda n: "(Y)es/(N)o ]:" * (n // 13),
    "exit codes": lambda n: "exited with code -" * (n // 18),
}


def session(text: str) -> list[Unit]:
    def unit(i: int, role: str, kind: str, body: str, **kw) -> Unit:
        return Unit(f"h:{i}", "h", i, role, kind, body, **kw)

    return [
        unit(0, "user", "text", text),
        unit(1, "assistant", "text", text),
        unit(2, "assistant", "thinking", text),
        unit(3, "assistant", "tool_call", json.dumps({"command": text}), tool_name="Bash", call_id="c"),
        unit(4, "user", "tool_result", text, tool_name="Bash", call_id="c"),
        unit(5, "assistant", "tool_call", text, tool_name="Edit", call_id="d"),  # raw, not JSON
    ]  # fmt: skip


def run(component: str, units: list[Unit]) -> None:
    if component == "labeller":
        Labeler().label(units)
    elif component == "features":
        batch_features(units)
    else:
        config = CompressorConfig(on_must_keep_overflow="truncate_oldest")
        compressor = SemanticCompressor(Labeler(), token_counter=HeuristicCounter(), config=config)
        compressor.compress(units, token_limit=sum(len(u.text) for u in units) // 12)


def cpu_time(component: str, units: list[Unit], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        run(component, units)
        best = min(best, time.thread_time() - t0)
    return best


@pytest.mark.parametrize("component", list(BUDGET_MS_PER_KB))
@pytest.mark.parametrize("name", list(HOSTILE))
def test_linear_in_the_text(component, name):
    small, large = (session(HOSTILE[name](n)) for n in (N, 4 * N))
    kb = sum(len(u.text) for u in large) / 1024
    run(component, small)  # warm caches (compiled regexes, token counts)
    t_small, t_large = cpu_time(component, small), cpu_time(component, large)
    per_kb = 1e3 * t_large / kb
    assert per_kb < BUDGET_MS_PER_KB[component], f"{per_kb:.2f} ms per KB"
    if 1e3 * t_large > NOISE_MS:
        assert t_large < RATIO * t_small, f"n -> 4n: {t_small * 1e3:.1f} -> {t_large * 1e3:.1f} ms"


@pytest.mark.slow
@pytest.mark.parametrize("component", list(BUDGET_MS_PER_KB))
def test_one_megabyte_line(component):
    line = "".join(HOSTILE[name](4_000) for name in HOSTILE).replace("\n", " ")
    line = (line * (1_000_000 // len(line) + 1))[:1_000_000]
    units = session(line)
    t = cpu_time(component, units, repeat=1)
    per_kb = 1e3 * t / (sum(len(u.text) for u in units) / 1024)
    assert per_kb < BUDGET_MS_PER_KB[component], f"{per_kb:.2f} ms per KB"
