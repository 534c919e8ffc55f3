"""winnow cib: probes, arms, metrics, and the whole run against a loopback stand-in model."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cib_standin import StandIn

from winnow.batch.cib.context import ContextBuilder
from winnow.batch.cib.metrics import (
    bootstrap_ci,
    clean_prediction,
    exact_match,
    f1,
    normalize_answer,
)
from winnow.batch.cib.probes import (
    ProbeFileError,
    filler_text,
    generate_probes,
    load_probes,
    read_facts,
)
from winnow.batch.cib.runner import Benchmark, CIBConfig, read_results
from winnow.serving.tokens import HeuristicCounter, default_token_counter

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"window": 4000, "buckets": (20, 80), "n": 3, "concurrency": 2, "max_retries": 0}


def _follow(probe, passages) -> str | None:
    facts = {(r, s): o for p in passages for r, s, o in read_facts(p)}
    entity = probe.entities[0]
    for rel in probe.relations:
        entity = facts.get((rel, entity))
    return entity


# --- probes ---------------------------------------------------------------------------------


def test_generated_probes_are_deterministic_multi_hop_and_answerable():
    a, b = generate_probes(8, seed=3), generate_probes(8, seed=3)
    assert [(p.question, p.answers, p.supporting) for p in a] == [
        (p.question, p.answers, p.supporting) for p in b
    ]
    assert generate_probes(8, seed=4)[0].question != a[0].question
    assert generate_probes(3, seed=3) == a[:3]  # probe i depends on (seed, i) alone: --n can grow
    assert {p.hops for p in a} == {2, 3}
    for p in a:
        assert p.entities[0] in p.question
        assert _follow(p, p.supporting) == p.answers[0]  # the supporting passages answer it
        assert len(p.supporting) == p.hops


def test_distractors_compete_but_never_contradict():
    for p in generate_probes(8, seed=0)[::2]:  # two- and three-hop questions
        stream = list(itertools.islice(p.distractor_stream(), 300))
        assert stream == list(itertools.islice(p.distractor_stream(), 300))  # deterministic
        facts = [f for d in stream for f in read_facts(d)]
        assert len(facts) == len(stream)  # one relation sentence each
        assert {r for r, _s, _o in facts} == set(p.relations)  # the question's relations only
        gold = set(p.entities)
        assert not any(s in gold or o in gold for _r, s, o in facts)
        # most subjects are a letter or two away from a gold entity: they compete
        near = sum(min(_edits(s, g) for g in gold) <= 2 for _r, s, _o in facts)
        assert near > 0.6 * len(facts)
        # and the gold answer still follows from the supporting passages among them
        assert _follow(p, stream + list(p.supporting)) == p.answers[0]


def _edits(a: str, b: str) -> int:
    """Levenshtein distance (short names only)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_filler_has_the_length_asked_and_no_facts():
    counter = default_token_counter()
    for n in (1, 7, 40, 133, 400):
        text = filler_text(n, f"k{n}", counter)
        assert n - 1 <= counter.count(text) <= n
        assert text == filler_text(n, f"k{n}", counter)
        assert not list(read_facts(text))
        words = text.split()  # no names: capitals only where a sentence starts
        assert all(
            i == 0 or words[i - 1].endswith(".") for i, w in enumerate(words) if w[0].isupper()
        )


# --- contexts -------------------------------------------------------------------------------


def test_arms_share_structure_and_fill_their_bucket():
    builder = ContextBuilder(20_000)
    probe = generate_probes(5, seed=1)[4]  # three hops
    low, high = builder.distractor(probe, 30), builder.distractor(probe, 70)
    for bucket, units in ((30, low), (70, high)):
        n = builder.request_tokens(builder.request(units))
        assert builder.target(bucket) - 120 <= n <= builder.target(bucket)
        assert units[-1].role == "user" and probe.question in units[-1].text
        assert units[0].role == "user"  # the task; the system prompt is outside the transcript
    # the higher bucket extends the lower one: the same competing passages, and more
    comp, comp_high = (
        [u.text for u in units if u.kind == "tool_result" and u.extra["cib_passage"][0] == "d"]
        for units in (low, high)
    )
    assert comp_high[: len(comp)] == comp and len(comp_high) > 2 * len(comp)
    # supporting passages sit at the same relative places at every bucket
    for units in (low, high):
        places = [i / len(units) for i, u in enumerate(units) if u.text in probe.supporting]
        assert len(places) == probe.hops
    rel = [
        [round(i / len(u), 1) for i, x in enumerate(u) if x.text in probe.supporting]
        for u in (low, high)
    ]
    assert rel[0] == pytest.approx(rel[1], abs=0.11)
    # the filler arm: the same units, the competing passages replaced by prose of their length
    filler = builder.filler(probe, high)
    assert [(u.role, u.kind, u.call_id) for u in filler] == [
        (u.role, u.kind, u.call_id) for u in high
    ]
    counter = builder.counter
    for a, b in zip(high, filler):
        if a.extra.get("cib_passage", "").startswith("d") and a.kind == "tool_result":
            assert a.text != b.text and counter.count(a.text) - 1 <= counter.count(
                b.text
            ) <= counter.count(a.text)
            assert not list(read_facts(b.text))
        else:
            assert a.text == b.text
    assert _follow(probe, [u.text for u in filler]) == probe.answers[0]


def test_compressed_contexts_fit_the_budget_with_valid_tool_pairs():
    from winnow.serving.compressor import orphan_call_ids

    builder = ContextBuilder(20_000)
    probe = generate_probes(2, seed=0)[1]
    units = builder.distractor(probe, 80)
    for method in ("winnow", "truncation", "masking"):
        out = builder.compress(units, method, 10)
        body = builder.request(out)
        assert builder.request_tokens(body) <= builder.target(10) + 50, method
        assert not orphan_call_ids(out), method
        assert out[-1].text == units[-1].text, method  # the question survives


def test_text_render_is_one_user_message():
    builder = ContextBuilder(8000, render="text")
    probe = generate_probes(1)[0]
    body = builder.request(builder.distractor(probe, 50))
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "tools" not in body
    content = body["messages"][1]["content"]
    assert (
        content.rstrip().endswith("Answer with the name only.") and "[notes/doc-0001.md]" in content
    )


# --- probe files ----------------------------------------------------------------------------


def test_probe_file_keeps_good_lines_and_names_bad_ones(tmp_path):
    path = tmp_path / "probes.jsonl"
    good = {"question": "Who?", "answer": "Ana", "supporting": ["Ana did it."], "distractors": []}
    lines = [
        json.dumps({**good, "id": "a"}),
        "{not json",
        json.dumps({"question": "Who?", "answer": "Ana"}),
        json.dumps({**good, "answer": ["Ana", "Ana B."], "id": "b"}),
        "",
        json.dumps({**good, "id": "a"}),
        json.dumps([1, 2]),
        json.dumps({**good, "supporting": [""]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    problems: list[str] = []
    probes = load_probes(path, problems)
    assert [p.id for p in probes] == ["a", "b"] and probes[1].answers == ("Ana", "Ana B.")
    assert [p.split(":")[1] for p in problems] == ["2", "3", "6", "7", "8"]
    assert all(p.startswith(f"{path}:") and "\n" not in p for p in problems)
    assert "supporting" in problems[1] and "duplicate" in problems[2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    with pytest.raises(ProbeFileError, match=r"bad.jsonl: no valid probe .*bad.jsonl:1:"):
        load_probes(bad)


def test_probe_file_runs_fill_from_the_other_probes(tmp_path):
    path = tmp_path / "p.jsonl"
    recs = [
        {
            "id": f"q{i}",
            "question": f"What is the code word of note {i}?",
            "answer": f"word{i}",
            "supporting": [f"The code word of note {i} is word{i}."],
            "distractors": [f"The code word of note {i}b is other{i}."],
        }
        for i in range(30)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    probes = load_probes(path)
    builder = ContextBuilder(4000, pool=probes)
    units = builder.distractor(probes[0], 50)
    own = [u for u in units if u.kind == "tool_result" and not u.extra.get("cib_pool")]
    pool = [u for u in units if u.extra.get("cib_pool") and u.kind == "tool_result"]
    assert len(own) == 2 and len(pool) > 20  # its supporting and its one distractor, then others'
    assert len({u.text for u in pool}) == len(pool)  # each used once
    assert builder.request_tokens(builder.request(units)) <= 2000


# --- metrics --------------------------------------------------------------------------------


def test_squad_metrics():
    assert normalize_answer("The  Velt-Dynamics!") == "veltdynamics"
    assert f1("the Velt Dynamics", ["Velt Dynamics"]) == 1.0
    assert f1("Velt", ["Velt Dynamics"]) == pytest.approx(2 / 3)
    assert f1("Qastral", ["Velt Dynamics", "Qastral"]) == 1.0
    assert f1("", ["Velt"]) == 0.0
    assert (
        exact_match("Lazenia.", ["lazenia"]) == 1.0
        and exact_match("in Lazenia", ["Lazenia"]) == 0.0
    )
    assert clean_prediction("<think>hmm\nno</think>\n\nAnswer: Lazenia.\nmore") == "Lazenia"
    assert clean_prediction(None) == ""
    lo, hi = bootstrap_ci([0, 1, 1, 0, 1, 1, 1, 0], "row")
    assert (lo, hi) == bootstrap_ci([0, 1, 1, 0, 1, 1, 1, 0], "row")
    assert 0 <= lo < 0.625 < hi <= 1
    assert bootstrap_ci([1, 1, 1], 0) == (1.0, 1.0)


# --- the whole run on the stand-in ---------------------------------------------------------


def test_cib_end_to_end_on_the_stand_in(tmp_path):
    with StandIn() as model:
        config = CIBConfig(base_url=model.url, model="stand-in", **SMALL)
        summary = Benchmark(config).run(tmp_path)
        assert model.problems == []  # every request valid for the API
        tasks = Benchmark(config).tasks()
        assert summary.written == summary.total == len(tasks) == 2 * 3 * (2 + 3)
        assert len(model.requests) == len(tasks)
        records, notes = read_results(tmp_path / "results.jsonl", config.config_hash())
        assert not notes and set(records) == {t.key for t in tasks}
        by_arm: dict[str, list[dict]] = {}
        for r in records.values():
            by_arm.setdefault(r["method"] or r["arm"], []).append(r)
        # occupancy comes from the stand-in's usage, which counts its own way
        for r in records.values():
            assert r["occupancy"] == r["prompt_tokens"] / 4000
        assert any(r["prompt_tokens"] != r["request_tokens"] for r in records.values())
        top = {a: [r for r in rs if r["bucket"] == 80] for a, rs in by_arm.items()}
        assert all(r["occupancy"] > 0.6 for a in ("filler", "distractor") for r in top[a])
        assert all(
            r["occupancy"] < 0.14 for a in ("winnow", "truncation", "masking") for r in top[a]
        )
        # the stand-in reads filler through, and is misled by competing passages
        assert all(r["f1"] == 1.0 for r in by_arm["filler"])
        assert sum(r["f1"] for r in top["distractor"]) < len(top["distractor"])
        assert all(r["competing"] > 20 for r in top["distractor"])
        # report and plots
        html = (tmp_path / "report.html").read_text()
        assert html.count("data:image/png;base64,") == 2 and "compressed: winnow" in html
        for png in ("f1.png", "em.png"):
            assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        summary_json = json.loads((tmp_path / "summary.json").read_text())
        assert len(summary_json["rows"]) == 2 * 2 + 3 * 2
        # a rerun sends nothing; another model is another configuration
        sent = len(model.requests)
        again = Benchmark(config).run(tmp_path, report=False)
        assert (again.skipped, again.written, len(model.requests)) == (len(tasks), 0, sent)
        other = CIBConfig(
            base_url=model.url, model="stand-in-2", **{**SMALL, "buckets": (20,)}, arms=("filler",)
        )
        Benchmark(other).run(tmp_path, report=False)
        assert len(model.requests) == sent + 3
        records2, _ = read_results(tmp_path / "results.jsonl", config.config_hash())
        assert records2 == records  # the first configuration's results untouched


def test_retries_on_429_and_5xx(tmp_path):
    with StandIn(faults=(429, 503)) as model:
        config = CIBConfig(
            base_url=model.url,
            model="stand-in",
            window=4000,
            buckets=(20,),
            n=2,
            arms=("filler",),
            concurrency=1,
            max_retries=3,
        )
        summary = Benchmark(config).run(tmp_path, report=False)
        assert (summary.written, summary.failed) == (2, 0)
        assert len(model.requests) == 2 + 2


def test_failures_are_reported_not_recorded_and_retried_on_rerun(tmp_path):
    with StandIn(faults=(500,) * 3) as model:
        config = CIBConfig(
            base_url=model.url,
            model="stand-in",
            window=4000,
            buckets=(20,),
            n=3,
            arms=("filler",),
            concurrency=1,
            max_retries=0,
        )
        first = Benchmark(config).run(tmp_path, report=False)
        assert (first.written, first.failed) == (0, 3)
        assert all("InternalServerError" in e for e in first.errors)
        second = Benchmark(config).run(tmp_path, report=False)
        assert (second.skipped, second.written) == (0, 3)


def test_a_line_cut_by_a_kill_is_dropped_and_redone(tmp_path):
    with StandIn() as model:
        config = CIBConfig(base_url=model.url, model="stand-in", **{**SMALL, "arms": ("filler",)})
        Benchmark(config).run(tmp_path, report=False)
        path = tmp_path / "results.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])  # killed mid-write
        sent = len(model.requests)
        summary = Benchmark(config).run(tmp_path, report=False)
        assert summary.written == 1 and len(model.requests) == sent + 1
        assert any("unfinished last line" in n for n in summary.notes)
        assert len(path.read_bytes().splitlines()) == len(lines)


def test_cli_plan_and_one_line_errors(tmp_path):
    from winnow.cli import main

    env = {**os.environ, "COLUMNS": "200"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "winnow.cli",
            "cib",
            "--window",
            "4000",
            "--buckets",
            "20,80",
            "--n",
            "2",
            "--plan",
            "--tps",
            "2000",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "compressed:winnow" in out.stdout and "at 2,000 tokens/s" in out.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nope\n")
    assert main(["cib", "--plan", "--probes", str(bad)]) == 1  # a bad value: one line, exit 1
    assert main(["cib", "--plan", "--arms", "filler,bogus"]) == 1  # a bad value: one line, exit 1
    assert main(["cib", "--model", "m"]) == 1  # a bad value: one line, exit 1


def test_importing_the_command_loads_no_heavy_module():
    code = (
        "import sys, winnow.cli, winnow.batch.cib, winnow.batch.cib.commands, winnow.serving;"
        "winnow.cli.build_parser();"
        "bad = [m for m in ('openai', 'matplotlib', 'torch') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# --- resume after a kill --------------------------------------------------------------------


def _cli(url: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "winnow.cli",
        "cib",
        "--base-url",
        url,
        "--model",
        "stand-in",
        "--window",
        "4000",
        "--buckets",
        "20,50,80",
        "--n",
        "4",
        "--concurrency",
        "2",
        "--max-retries",
        "0",
        "-o",
        str(out),
    ]


def _comparable(path: Path) -> dict[str, tuple]:
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    keys = [r["key"] for r in recs]
    assert len(keys) == len(set(keys)), "a result was written twice"
    return {
        r["key"]: (r["prediction"], r["f1"], r["em"], r["prompt_tokens"], r["request_tokens"])
        for r in recs
    }


@pytest.mark.slow
def test_resume_after_sigkill_redoes_nothing_and_matches_an_uninterrupted_run(tmp_path):
    env = {**os.environ, "OPENAI_API_KEY": "loopback"}
    with StandIn(delay=0.05, lifetime=600) as model:
        killed = tmp_path / "killed"
        proc = subprocess.Popen(
            _cli(model.url, killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        results = killed / "results.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if results.exists() and len(results.read_bytes().splitlines()) >= 12:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(0.5)  # answers the killed run had in flight finish on the server
        done = len(results.read_bytes().splitlines())
        total = 3 * 4 * (2 + 3)
        assert 12 <= done < total
        before = model.answered
        rerun = subprocess.run(
            _cli(model.url, killed), env=env, capture_output=True, text=True, timeout=300
        )
        assert rerun.returncode == 0, rerun.stderr
        assert f"{done} from before" in rerun.stdout.replace("\n", " ")
        # only what was not written was asked again (plus any answer lost in flight at the kill)
        assert model.answered - before == total - done
        whole = tmp_path / "whole"
        straight = subprocess.run(
            _cli(model.url, whole), env=env, capture_output=True, text=True, timeout=300
        )
        assert straight.returncode == 0, straight.stderr
        assert model.problems == []
    assert _comparable(results) == _comparable(whole / "results.jsonl")
    assert (killed / "report.html").exists() and (killed / "f1.png").exists()


def test_a_probe_file_end_to_end_with_the_text_render(tmp_path):
    path = tmp_path / "probes.jsonl"
    with path.open("w") as f:
        for p in generate_probes(3, seed=5):
            rec = {
                "id": p.id,
                "question": p.question,
                "answer": list(p.answers),
                "supporting": list(p.supporting),
                "distractors": list(itertools.islice(p.distractor_stream(), 40)),
            }
            f.write(json.dumps(rec) + "\n")
        f.write('{"question": "no answer"}\n')  # reported, the others kept
    with StandIn() as model:
        config = CIBConfig(
            base_url=model.url, model="stand-in", probes=str(path), render="text", **SMALL
        )
        bench = Benchmark(config)
        assert bench.notes == [f"{path}:4: 'answer' must be a non-empty string or list of strings"]
        summary = bench.run(tmp_path / "out", report=False)
        assert model.problems == [] and summary.written == summary.total == 30
        assert all(len(r.body["messages"]) == 2 for r in model.requests)
        records, _ = read_results(tmp_path / "out" / "results.jsonl", config.config_hash())
        assert all(r["f1"] == 1.0 for r in records.values() if r["arm"] == "filler")
        # edited probes, or another render, are another configuration
        before = config.config_hash()
        assert CIBConfig(**{**config.__dict__, "render": "tools"}).config_hash() != before
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))
        assert config.config_hash() != before


def test_a_context_that_cannot_be_built_fails_alone(tmp_path, monkeypatch):
    with StandIn() as model:
        config = CIBConfig(base_url=model.url, model="stand-in", **SMALL)
        bench = Benchmark(config)
        real = bench.builder.compress

        def broken(units, method, budget):
            if method == "winnow":
                raise RuntimeError("no classifier")
            return real(units, method, budget)

        monkeypatch.setattr(bench.builder, "compress", broken)
        summary = bench.run(tmp_path, report=False)
        assert (summary.written, summary.failed) == (24, 6)
        assert summary.errors[0].endswith("building the context: RuntimeError: no classifier")


def test_baselines_keep_the_newest_and_mark_what_they_rewrite():
    from winnow.data.schema import Unit
    from winnow.serving.baselines import mask_observations, truncate_oldest
    from winnow.serving.compressor import orphan_call_ids
    from winnow.serving.tokens import unit_tokens

    counter = default_token_counter()
    units = [Unit("u0", "s", 0, "user", "text", "Fix the parser, keep the API stable.")]
    for i in range(1, 15):
        args = '{"path": "a.py"}'
        units.append(Unit(f"c{i}", "s", 2 * i - 1, "assistant", "tool_call", args, "Read", f"t{i}"))
        text, raw = f"line {i} " * 40, {"raw": {"type": "tool_result"}}
        units.append(
            Unit(f"r{i}", "s", 2 * i, "tool", "tool_result", text, "Read", f"t{i}", extra=raw)
        )
    limit = sum(unit_tokens(u, counter) for u in units) // 3
    cut = truncate_oldest(units, limit, counter)
    assert sum(unit_tokens(u, counter) for u in cut) <= limit
    assert cut[-1] is units[-1] and not orphan_call_ids(cut)
    masked = mask_observations(units, 10**6, counter)
    old = [u for u in masked if u.kind == "tool_result"][:4]
    assert all(u.text == "[output omitted]" and u.extra == {"strategy": "placeholder"} for u in old)
    assert masked[-1] is units[-1]  # the newest ten results untouched, raw block and all


def test_probe_file_nested_too_deep_is_one_line(tmp_path):
    path = tmp_path / "probes.jsonl"
    good = {"question": "Who?", "answer": "Ana", "supporting": ["Ana did it."], "distractors": []}
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(
        "\n".join([json.dumps({**good, "id": "a"}), deep, json.dumps({**good, "id": "b"})])
    )
    problems: list[str] = []
    assert [p.id for p in load_probes(path, problems)] == ["a", "b"]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: ")


def test_probe_file_with_a_byte_order_mark_loses_no_probe(tmp_path):
    path = tmp_path / "probes.jsonl"  # as Windows editors save UTF-8
    good = {"question": "Who?", "answer": "Ana", "supporting": ["Ana did it."], "distractors": []}
    lines = [json.dumps({**good, "id": i}) for i in ("a", "b")]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    problems: list[str] = []
    assert [p.id for p in load_probes(path, problems)] == ["a", "b"] and problems == []


def test_a_results_line_nested_100000_deep_is_one_note(tmp_path):
    path = tmp_path / "results.jsonl"
    good = {"key": "filler/10/q1", "config": "abc", "f1": 1.0}
    path.write_text(json.dumps(good) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    records, notes = read_results(path, "abc")
    assert list(records) == ["filler/10/q1"]
    assert len(notes) == 1 and notes[0].startswith(f"{path}:2: ")


@pytest.mark.parametrize("render", ["tools", "text"])
def test_plan_counts_what_the_run_sends_without_rebuilding_per_bucket(monkeypatch, render):
    """`--plan` at a 128K window took a minute: every bucket regenerated each probe's
    passages and their filler and rendered every request. Its totals stay exact (what
    `request_tokens` counts of each request), while each probe's passages and each filler
    passage are made once for all buckets and no request is rendered."""
    import winnow.batch.cib.context as context
    import winnow.batch.cib.probes as probes

    config = CIBConfig(window=6000, buckets=(30, 60, 90), n=2, render=render)
    bench = Benchmark(config)
    expected: dict[str, int] = {}
    for bucket in config.buckets:
        for probe in bench.probes:
            units = bench.builder.distractor(probe, bucket)
            for arm, arm_units in (
                ("distractor", units),
                ("filler", bench.builder.filler(probe, units)),
            ):
                n = bench.builder.request_tokens(bench.builder.request(arm_units))
                expected[arm] = expected.get(arm, 0) + n
    calls = {"filler": 0, "streams": 0}
    real_filler, real_stream = context.filler_text, probes.Probe.distractor_stream

    def filler(*a, **kw):
        calls["filler"] += 1
        return real_filler(*a, **kw)

    def stream(self):
        calls["streams"] += 1
        return real_stream(self)

    def no_request(units):
        raise AssertionError("the plan rendered a request")

    fresh = Benchmark(config)
    monkeypatch.setattr(context, "filler_text", filler)
    monkeypatch.setattr(probes.Probe, "distractor_stream", stream)
    monkeypatch.setattr(fresh.builder, "request", no_request)
    plan = fresh.plan()
    assert {a: plan["prompt_tokens"][a] for a in expected} == expected
    assert calls["streams"] == len(fresh.probes)  # once per probe, not once per bucket
    competing = sum(
        u.kind == "tool_result" and u.extra["cib_passage"][0] == "d"
        for p in fresh.probes
        for u in fresh.builder.distractor(p, max(config.buckets))
    )
    assert calls["filler"] == competing  # each competing passage's filler once


def _filler_one_by_one(tokens, key, counter):
    """filler_text as first written: each sentence, then each word, added and counted."""
    import random as _random

    from winnow.batch.cib.probes import GENERATOR_VERSION, _filler_sentences

    rng = _random.Random(f"{GENERATOR_VERSION}:filler:{key}")
    text = ""
    for sentence in _filler_sentences(rng):
        longer = f"{text} {sentence}" if text else sentence
        if counter.count(longer) > tokens:
            break
        text = longer
    for word in sentence.split(" "):
        longer = f"{text} {word}" if text else word
        if counter.count(longer) > tokens:
            break
        text = longer
    return text


@pytest.mark.parametrize("counter", [default_token_counter(), HeuristicCounter()])
def test_filler_text_is_the_text_of_adding_one_sentence_at_a_time(counter):
    """Faster, and the same prose as before for every length (results on disk stay valid)."""
    for n in [*range(0, 40), 57, 150, 151, 333, 1000, 2048]:
        for key in ("gen-0-1:d7", f"p{n}"):
            assert filler_text(n, key, counter) == _filler_one_by_one(n, key, counter), (n, key)
