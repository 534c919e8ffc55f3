"""The benchmark's report: a table per arm and bucket, PNG plots, one self-contained HTML page.

rows = summarize(records)                      # F1 / EM with 95% bootstrap intervals
write_report(records, config, "out/cib")       # report.html, f1.png, em.png, summary.json
"""

from __future__ import annotations

import base64
import html
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from winnow.batch.cib.metrics import bootstrap_ci

STYLES = {  # arm or compression method: (colour, marker)
    "filler": ("#4c72b0", "o"),
    "distractor": ("#c44e52", "s"),
    "winnow": ("#55a868", "D"),
    "truncation": ("#dd8452", "^"),
    "masking": ("#8172b3", "v"),
}


@dataclass
class Row:
    """One arm (and compression method) at one bucket."""

    arm: str
    method: str | None
    bucket: float
    n: int
    occupancy: float | None  # mean prompt_tokens the endpoint reported / window
    request_occupancy: float  # mean of the request's own count (winnow's tokenizer) / window
    source_occupancy: float | None  # compressed: the context before compression, own count
    f1: float
    f1_ci: tuple[float, float]
    em: float
    em_ci: tuple[float, float]
    # F1 minus the paired baseline's on the same probes: the distractor arm vs the filler arm,
    # a compressed method vs the distractor arm it was compressed from
    delta_f1: float | None
    delta_ci: tuple[float, float] | None
    supporting_kept: float  # share of the supporting passages sent verbatim
    competing: float  # competing passages sent verbatim, mean

    @property
    def label(self) -> str:
        return f"compressed: {self.method}" if self.arm == "compressed" else self.arm


def summarize(records: Sequence[dict[str, Any]], seed: int = 0) -> list[Row]:
    """The table, arm by arm and bucket by bucket; intervals are seeded by the row."""
    groups: dict[tuple[str, str | None, float], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r["arm"], r.get("method"), float(r["bucket"])].append(r)
    by_probe = {k: {r["probe"]: r for r in rs} for k, rs in groups.items()}
    rows = []
    order = {"filler": 0, "distractor": 1, "compressed": 2}
    for key in sorted(groups, key=lambda k: (order.get(k[0], 3), k[1] or "", k[2])):
        arm, method, bucket = key
        rs = groups[key]
        tag = f"{seed}:{arm}:{method}:{bucket:g}"
        f1s = [r["f1"] for r in rs]
        ems = [r["em"] for r in rs]
        usage = [r["prompt_tokens"] / r["window"] for r in rs if r.get("prompt_tokens")]
        base = ("filler", None, bucket) if arm == "distractor" else ("distractor", None, bucket)
        paired = by_probe.get(base) if arm != "filler" else None
        diffs = [r["f1"] - paired[r["probe"]]["f1"] for r in rs if paired and r["probe"] in paired]
        sources = [r["source_tokens"] / r["window"] for r in rs if r.get("source_tokens")]
        rows.append(
            Row(
                arm=arm,
                method=method,
                bucket=bucket,
                n=len(rs),
                occupancy=_mean(usage) if usage else None,
                request_occupancy=_mean([r["request_tokens"] / r["window"] for r in rs]),
                source_occupancy=_mean(sources) if sources else None,
                f1=_mean(f1s),
                f1_ci=bootstrap_ci(f1s, f"{tag}:f1"),
                em=_mean(ems),
                em_ci=bootstrap_ci(ems, f"{tag}:em"),
                delta_f1=_mean(diffs) if diffs else None,
                delta_ci=bootstrap_ci(diffs, f"{tag}:delta") if diffs else None,
                supporting_kept=_mean([r["supporting_kept"] / r["supporting"] for r in rs]),
                competing=_mean([r["competing"] for r in rs]),
            )
        )
    return rows


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# --- plots ----------------------------------------------------------------------------------


def plot(rows: Sequence[Row], metric: str, path: Path, title: str = "") -> Path:
    """Score vs occupancy: the filler and distractor arms as lines with 95% bands, each
    compression method as points at the occupancy its context was compressed from."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    distractor_x = {r.bucket: _x(r) for r in rows if r.arm == "distractor"}
    budgets = set()
    for name in ("filler", "distractor", "winnow", "truncation", "masking"):
        rs = sorted((r for r in rows if (r.method or r.arm) == name), key=lambda r: r.bucket)
        if not rs:
            continue
        colour, marker = STYLES[name]
        ys = [getattr(r, metric) * 100 for r in rs]
        lo = [getattr(r, f"{metric}_ci")[0] * 100 for r in rs]
        hi = [getattr(r, f"{metric}_ci")[1] * 100 for r in rs]
        if rs[0].arm == "compressed":
            # side by side around the occupancy they were compressed from
            shift = {"winnow": -0.9, "truncation": 0.0, "masking": 0.9}.get(name, 0.0)
            xs = [distractor_x.get(r.bucket, r.source_occupancy or 0) * 100 + shift for r in rs]
            budgets |= {round((r.occupancy or r.request_occupancy) * 100) for r in rs}
            yerr = [[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]]
            ax.errorbar(
                xs, ys, yerr=yerr, fmt=marker, color=colour, capsize=3, label=rs[0].label, ms=6
            )
        else:
            xs = [_x(r) * 100 for r in rs]
            ax.plot(xs, ys, marker=marker, color=colour, label=f"{name} arm")
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.18, linewidth=0)
    ax.set_xlabel("occupancy of the window, % (the endpoint's usage.prompt_tokens)")
    ax.set_ylabel(("token-F1" if metric == "f1" else "exact match") + ", % (95% bootstrap CI)")
    ax.set_xlim(0, 105)
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if budgets:
        ax.text(
            1.02,
            0.02,
            "compressed points were\nsent at ~"
            + "/".join(f"{b}%" for b in sorted(budgets))
            + " occupancy; each\nsits at the occupancy\nit was compressed from",
            transform=ax.transAxes,
            ha="left",
            va="bottom",
            fontsize=7,
            color="#444",
        )
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _x(r: Row) -> float:
    return r.occupancy if r.occupancy is not None else r.request_occupancy


# --- the page -------------------------------------------------------------------------------

LIMITS = """
<ul>
<li><b>What a context is.</b> Each probe is an agent transcript: the user asks the agent to
read the notes of a folder, each passage comes back as the result of one <code>read_file</code>
call, and the question is the user's last message. That is what winnow compresses in a real
agent session (tool output, with the request at the end), so the compressed arm measures what
winnow would do there; it is also what the baselines act on (observation masking replaces old
tool results: passages sent as user messages would leave it nothing to mask). The filler and
distractor arms hold every unit in the same place and change only the competing passages'
text.</li>
<li><b>Occupancy is not interference.</b> The filler arm adds tokens that say nothing about
the question; the distractor arm adds passages with the question's relations about entities
with similar names. A gap between them at the same occupancy is the cost of interference; a
slope in the filler arm is the cost of length alone.</li>
<li><b>Buckets are shares of the window you gave.</b> The contexts are sized by winnow's
tokenizer (cl100k); the x-axis is the endpoint's own <code>usage.prompt_tokens</code>, which
differs by the model's tokenizer. If the window is not the model's real context length, the
buckets are not the occupancy the model sees.</li>
<li><b>The compressed arm</b> compresses the distractor context of each bucket to the budget:
winnow's SemanticCompressor (query-agnostic: it does not see which passages answer the
question), oldest-first truncation and observation masking (all but the newest ten tool
results replaced by a placeholder, then truncation). Its points sit at the occupancy the context
was compressed <i>from</i>; every one was sent at about the budget.</li>
<li><b>Small samples.</b> With n probes per bucket the intervals are wide; differences whose
paired interval (&Delta; columns) spans 0 are not shown to exist.</li>
</ul>
"""


def write_report(
    records: Sequence[dict[str, Any]], config: dict[str, Any], out_dir: str | Path
) -> Path:
    """report.html (plots embedded), f1.png, em.png and summary.json in `out_dir`."""
    out = Path(out_dir)
    rows = summarize(records, seed=int(config.get("seed", 0)))
    title = f"{config.get('model', '')}, window {config.get('window', 0):,} tokens"
    pngs = {m: plot(rows, m, out / f"{m}.png", title) for m in ("f1", "em")}
    totals = {
        "requests": len(records),
        "prompt_tokens": sum(r.get("prompt_tokens") or 0 for r in records),
        "completion_tokens": sum(r.get("completion_tokens") or 0 for r in records),
        "request_tokens": sum(r["request_tokens"] for r in records),
        "no_usage": sum(1 for r in records if not r.get("prompt_tokens")),
    }
    (out / "summary.json").write_text(
        json.dumps(
            {"config": config, "totals": totals, "rows": [asdict(r) for r in rows]}, indent=2
        )
        + "\n"
    )
    page = _page(rows, config, totals, pngs)
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def table_rows(rows: Sequence[Row]) -> list[list[str]]:
    """The table as text cells (the HTML page and the command line print the same)."""
    out = []
    for r in rows:
        out.append(
            [
                r.label,
                f"{r.bucket:g}%",
                str(r.n),
                _pct(r.occupancy),
                _pct(r.request_occupancy),
                f"{r.f1 * 100:.1f} [{r.f1_ci[0] * 100:.1f}, {r.f1_ci[1] * 100:.1f}]",
                f"{r.em * 100:.1f} [{r.em_ci[0] * 100:.1f}, {r.em_ci[1] * 100:.1f}]",
                (
                    f"{r.delta_f1 * 100:+.1f} [{r.delta_ci[0] * 100:+.1f}, {r.delta_ci[1] * 100:+.1f}]"
                    if r.delta_f1 is not None and r.delta_ci
                    else ""
                ),
                f"{r.supporting_kept:.0%}",
                f"{r.competing:.0f}",
            ]
        )
    return out


TABLE_HEADER = [
    "arm",
    "bucket",
    "n",
    "occupancy",
    "own count",
    "F1 [95% CI]",
    "EM [95% CI]",
    "ΔF1 [95% CI]",
    "supporting",
    "competing",
]
TABLE_NOTE = (
    "occupancy: the endpoint's usage.prompt_tokens / window; own count: the request's cl100k "
    "count / window; ΔF1: paired on the same probes, the distractor arm vs the filler arm and a "
    "compressed method vs the distractor context it was compressed from; supporting: share of "
    "the supporting passages sent verbatim; competing: competing passages sent verbatim (mean)"
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _page(
    rows: Sequence[Row], config: dict[str, Any], totals: dict[str, int], pngs: dict[str, Path]
) -> str:
    e = html.escape
    imgs = "".join(
        f'<img alt="{m} vs occupancy" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}">'
        for m, p in pngs.items()
    )
    head = "".join(f"<th>{e(h)}</th>" for h in TABLE_HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>" for cells in table_rows(rows)
    )
    conf = "".join(
        f"<tr><th>{e(str(k))}</th><td>{e(json.dumps(v) if not isinstance(v, str) else v)}</td></tr>"
        for k, v in config.items()
    )
    tot = "".join(f"<tr><th>{e(k)}</th><td>{v:,}</td></tr>" for k, v in totals.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>winnow cib: {e(str(config.get("model", "")))}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, th:first-child {{ text-align: left; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>Context-intelligence benchmark</h1>
<p>Model <b>{e(str(config.get("model", "")))}</b> at {e(str(config.get("base_url", "")))};
window {config.get("window", 0):,} tokens; probes: {e(str(config.get("probes_source", "")))}.
&Delta;F1: the distractor arm against the filler arm, a compressed method against the
distractor context it was compressed from, paired on the same probes.</p>
{imgs}
<h2>Results</h2>
<table><tr>{head}</tr>{body}</table>
<p>{e(TABLE_NOTE)}</p>
<h2>Totals</h2>
<table>{tot}</table>
<h2>How to read it, and its limits</h2>
{LIMITS}
<h2>Configuration</h2>
<table>{conf}</table>
</body></html>
"""


__all__ = [
    "LIMITS",
    "TABLE_HEADER",
    "TABLE_NOTE",
    "Row",
    "plot",
    "summarize",
    "table_rows",
    "write_report",
]
