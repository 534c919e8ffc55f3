"""The benchmark run: every (arm, bucket, probe) sent to an OpenAI-compatible endpoint, resumable.

    config = CIBConfig(base_url="http://localhost:8000/v1", model="qwen3-8b", window=32_768)
    summary = Benchmark(config).run("out/cib")      # results.jsonl, report.html, f1.png, em.png

Each answer is appended to `results.jsonl` as soon as it arrives, keyed by arm, method, bucket,
probe and the configuration's hash: a rerun skips what is done, and a changed configuration
(model, endpoint, window, probes, prompt, render, ...) never mixes with earlier results.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from winnow.batch.cib.context import METHODS, QUESTION, SYSTEM_PROMPT, TASK, ContextBuilder
from winnow.batch.cib.metrics import clean_prediction, exact_match, f1
from winnow.batch.cib.probes import GENERATOR_VERSION, Probe, generate_probes, load_probes
from winnow.data.schema import Unit
from winnow.serving.tokens import default_token_counter

ARMS = ("filler", "distractor", "compressed")
DEFAULT_BUCKETS = (10, 20, 30, 40, 50, 60, 70, 80, 90)
RESULTS = "results.jsonl"
MAX_CONSECUTIVE_FAILURES = 20  # an endpoint that fails this often in a row is down: stop


@dataclass
class CIBConfig:
    """One benchmark run. Only the fields that change an answer enter the hash (`config_hash`):
    n, buckets, arms and methods choose which results to produce, not what each one is."""

    base_url: str | None = None
    model: str = ""
    window: int = 128_000
    buckets: tuple[float, ...] = DEFAULT_BUCKETS
    n: int = 25
    arms: tuple[str, ...] = ARMS
    methods: tuple[str, ...] = METHODS  # of the compressed arm
    budget: float = 10.0  # the compressed arm's share of the window, percent
    probes: str | None = None  # a JSONL probe file; None: generated
    seed: int = 0
    concurrency: int = 4
    max_tokens: int = 64
    temperature: float = 0.0
    max_retries: int = 6  # the SDK's, with exponential backoff, on 408 / 409 / 429 / 5xx
    timeout: float = 600.0
    render: str = "tools"
    api_key: str | None = field(default=None, repr=False)  # default: $OPENAI_API_KEY

    def __post_init__(self) -> None:
        self.buckets = tuple(float(b) for b in self.buckets)
        self.arms, self.methods = tuple(self.arms), tuple(self.methods)
        if not self.buckets or any(not 0 < b <= 100 for b in self.buckets):
            raise ValueError("buckets must be percentages of the window, in (0, 100]")
        if unknown := set(self.arms) - set(ARMS):
            raise ValueError(f"unknown arm {sorted(unknown)[0]!r}; one of {', '.join(ARMS)}")
        if unknown := set(self.methods) - set(METHODS):
            raise ValueError(f"unknown method {sorted(unknown)[0]!r}; one of {', '.join(METHODS)}")
        if self.window < 1000:
            raise ValueError("window must be at least 1000 tokens")
        if not 0 < self.budget < 100:
            raise ValueError("budget must be a percentage of the window, in (0, 100)")
        if self.n < 1 or self.concurrency < 1:
            raise ValueError("n and concurrency must be at least 1")

    def config_hash(self) -> str:
        """What an answer depends on, hashed: a rerun with another value starts afresh."""
        probes = _file_digest(self.probes) if self.probes else f"{GENERATOR_VERSION}:{self.seed}"
        parts = {
            "model": self.model,
            "base_url": (self.base_url or "").rstrip("/"),
            "window": self.window,
            "probes": probes,
            "prompt": [SYSTEM_PROMPT, TASK, QUESTION],
            "render": self.render,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "counter": getattr(default_token_counter(), "name", "?"),
        }
        raw = json.dumps(parts, sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Task:
    """One request: an arm (with a compression method for the compressed arm) at a bucket."""

    arm: str
    method: str | None
    bucket: float
    probe: Probe
    budget: float | None = None

    @property
    def key(self) -> str:
        arm = f"compressed:{self.method}@{self.budget:g}" if self.arm == "compressed" else self.arm
        return f"{arm}/{self.bucket:g}/{self.probe.id}"


@dataclass
class RunSummary:
    """What a run did: results written now, already there, failed; where the report went."""

    total: int
    skipped: int
    written: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    seconds: float = 0.0
    stopped: str | None = None  # why the run stopped early
    report: Path | None = None
    notes: list[str] = field(default_factory=list)


class Benchmark:
    """Runs a CIBConfig against its endpoint; `client` overrides the OpenAI client."""

    def __init__(self, config: CIBConfig, client: Any = None):
        self.config = config
        self._client = client
        self.notes: list[str] = []  # problems with the probe file, one line each
        # a probe file's probes all lend passages, whatever --n: contexts never depend on it
        pool = load_probes(config.probes, self.notes) if config.probes else []
        self.probes = pool[: config.n] if config.probes else generate_probes(config.n, config.seed)
        self.builder = ContextBuilder(config.window, pool=pool, render=config.render)
        self._source: tuple[object, int] = (None, 0)  # the last context compressed, its tokens

    # -- plan ------------------------------------------------------------------------------

    def tasks(self) -> list[Task]:
        """Every request of the run, bucket by bucket (so that a partial run covers every arm)."""
        c = self.config
        out = []
        for bucket in c.buckets:
            for probe in self.probes:
                for arm in c.arms:
                    if arm != "compressed":
                        out.append(Task(arm, None, bucket, probe))
                    elif bucket > c.budget:  # at or under the budget there is nothing to remove
                        out += [Task(arm, m, bucket, probe, c.budget) for m in c.methods]
        return out

    def plan(self) -> dict[str, Any]:
        """Request and prompt-token totals by winnow's count, without calling the endpoint. The
        compressed arm is counted at its budget (its requests are at most that)."""
        tokens: dict[str, int] = {}
        requests: dict[str, int] = {}
        for bucket, probe, tasks in self._groups(self.tasks()):
            distractor = self.builder.distractor(probe, bucket)
            for t in tasks:
                if t.arm == "compressed":
                    n = self.builder.target(self.config.budget)
                else:
                    units = (
                        distractor
                        if t.arm == "distractor"
                        else self.builder.filler(probe, distractor)
                    )
                    n = self.builder.tokens(units)
                name = t.arm if t.arm != "compressed" else f"compressed:{t.method}"
                tokens[name] = tokens.get(name, 0) + n
                requests[name] = requests.get(name, 0) + 1
        return {"requests": requests, "prompt_tokens": tokens}

    # -- run -------------------------------------------------------------------------------

    def run(
        self,
        out_dir: str | Path,
        *,
        on_start: Callable[[int, int], None] | None = None,
        on_result: Callable[[dict[str, Any]], None] | None = None,
        on_error: Callable[[str], None] | None = None,
        report: bool = True,
    ) -> RunSummary:
        """Send what is not done yet, append each answer as it comes, then write the report."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / RESULTS
        chash = self.config.config_hash()
        tasks = self.tasks()
        start = time.perf_counter()
        with _locked_append(path) as f:
            done, notes = read_results(path, chash)
            self.notes += notes
            todo = [t for t in tasks if t.key not in done]
            summary = RunSummary(total=len(tasks), skipped=len(tasks) - len(todo), notes=self.notes)
            (out / "config.json").write_text(json.dumps(self._describe(chash), indent=2) + "\n")
            if on_start:
                on_start(len(tasks), summary.skipped)
            if todo:
                _ = self.client  # made here, not raced for by the worker threads
                self._send(todo, chash, f, summary, on_result, on_error)
        summary.seconds = time.perf_counter() - start
        if report:
            from winnow.batch.cib.report import write_report

            records, _n = read_results(path, chash)
            keys = {t.key for t in tasks}
            summary.report = write_report(
                [r for k, r in records.items() if k in keys], self._describe(chash), out
            )
        return summary

    def _send(
        self,
        todo: list[Task],
        chash: str,
        f: IO[str],
        summary: RunSummary,
        on_result: Callable[[dict[str, Any]], None] | None,
        on_error: Callable[[str], None] | None,
    ) -> None:
        """Build each request here (the compressor and the token counter are not shared with
        threads), send up to `concurrency` at once, write each answer as it completes."""
        in_flight: dict[Future, tuple[Task, dict[str, Any]]] = {}
        consecutive = 0

        def fail(task: Task, what: str, e: Exception) -> None:
            summary.failed += 1
            summary.errors.append(f"{task.key}: {what}{type(e).__name__}: {_first_line(e)}")
            if on_error:
                on_error(summary.errors[-1])

        def collect(block: bool) -> None:
            nonlocal consecutive
            ready, _ = wait(
                list(in_flight), timeout=None if block else 0, return_when=FIRST_COMPLETED
            )
            for fut in ready:
                task, meta = in_flight.pop(fut)
                try:
                    record = self._record(task, meta, chash, *fut.result())
                except Exception as e:  # noqa: BLE001 - one failed request must not lose the others
                    consecutive += 1
                    fail(task, "", e)
                    continue
                consecutive = 0
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
                f.flush()  # a killed run keeps every answer it was given
                summary.written += 1
                summary.prompt_tokens += record["prompt_tokens"] or 0
                if on_result:
                    on_result(record)

        with ThreadPoolExecutor(self.config.concurrency) as pool:
            try:
                for bucket, probe, tasks in self._groups(todo):
                    distractor = self.builder.distractor(probe, bucket)
                    for task in tasks:
                        try:
                            meta = self._units(task, probe, distractor)
                            meta["body"] = self.builder.request(meta["units"])
                        except Exception as e:  # noqa: BLE001 - e.g. a compressor that fails
                            fail(task, "building the context: ", e)
                            continue
                        in_flight[pool.submit(self._call, meta["body"])] = (task, meta)
                        while len(in_flight) >= 2 * self.config.concurrency:
                            collect(block=True)
                        if consecutive >= MAX_CONSECUTIVE_FAILURES:
                            summary.stopped = f"{consecutive} requests in a row failed (last: {summary.errors[-1]})"
                            return
                        collect(block=False)
                while in_flight:
                    collect(block=True)
            finally:
                for fut in in_flight:
                    fut.cancel()

    def _units(self, task: Task, probe: Probe, distractor: list[Unit]) -> dict[str, Any]:
        """The task's transcript, the tokens it was compressed from, and how many competing
        passages it still holds verbatim."""
        competing = [u.text for u in distractor if _passage(u).startswith("d")]
        if task.arm == "distractor":
            return {"units": distractor, "source_tokens": None, "competing": len(competing)}
        if task.arm == "filler":
            units = self.builder.filler(probe, distractor)
            return {"units": units, "source_tokens": None, "competing": 0}
        assert task.method and task.budget is not None
        units = self.builder.compress(distractor, task.method, task.budget)
        texts = {u.text for u in units}
        if self._source[0] is not distractor:  # counted once for the methods of one context
            self._source = (
                distractor,
                self.builder.request_tokens(self.builder.request(distractor)),
            )
        return {
            "units": units,
            "source_tokens": self._source[1],
            "competing": sum(t in texts for t in competing),
        }

    def _call(self, body: dict[str, Any]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        response = self.client.chat.completions.create(
            model=self.config.model,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            **body,
        )
        return response, time.perf_counter() - t0

    def _record(
        self, task: Task, meta: dict[str, Any], chash: str, response: Any, seconds: float
    ) -> dict[str, Any]:
        choice = response.choices[0]
        reply = choice.message.content
        prediction = clean_prediction(reply)
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        texts = {u.text for u in meta["units"]}
        probe = task.probe
        request_tokens = self.builder.request_tokens(meta["body"])
        return {
            "config": chash,
            "key": task.key,
            "arm": task.arm,
            "method": task.method,
            "budget": task.budget,
            "bucket": task.bucket,
            "probe": probe.id,
            "hops": probe.hops,
            "question": probe.question,
            "answers": list(probe.answers),
            "reply": reply,
            "prediction": prediction,
            "f1": f1(prediction, probe.answers),
            "em": exact_match(prediction, probe.answers),
            "prompt_tokens": prompt,
            "completion_tokens": getattr(usage, "completion_tokens", None),
            "request_tokens": request_tokens,
            "source_tokens": meta["source_tokens"],
            "window": self.config.window,
            "occupancy": prompt / self.config.window if prompt else None,
            "supporting_kept": sum(p in texts for p in probe.supporting),
            "supporting": len(probe.supporting),
            "competing": meta["competing"],
            "finish_reason": choice.finish_reason,
            "model": getattr(response, "model", None),
            "seconds": round(seconds, 3),
        }

    # -- parts -----------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                base_url=self.config.base_url,
                api_key=self.config.api_key or os.environ.get("OPENAI_API_KEY") or "none",
                max_retries=self.config.max_retries,
                timeout=self.config.timeout,
            )
        return self._client

    @staticmethod
    def _groups(tasks: list[Task]) -> Iterator[tuple[float, Probe, list[Task]]]:
        """Tasks grouped by (bucket, probe), in order: one distractor context serves them all."""
        group: list[Task] = []
        for t in tasks:
            if group and (t.bucket, t.probe.id) != (group[0].bucket, group[0].probe.id):
                yield group[0].bucket, group[0].probe, group
                group = []
            group.append(t)
        if group:
            yield group[0].bucket, group[0].probe, group

    def _describe(self, chash: str) -> dict[str, Any]:
        d = dataclasses.asdict(self.config)
        d.pop("api_key", None)
        d.update(
            config_hash=chash,
            probes_source=self.config.probes
            or f"generated ({GENERATOR_VERSION}, seed {self.config.seed})",
            n_probes=len(self.probes),
            counter=getattr(self.builder.counter, "name", "?"),
        )
        return d


# --- the results file ---------------------------------------------------------------------


def read_results(path: Path, chash: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The records of one configuration by key (the first of each), and a line per problem.

    A last line cut short by a killed run is removed (it was never complete); any other bad
    line is reported and left where it is."""
    records: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    if not path.exists():
        return records, notes
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as f:
            f.truncate(cut)
        notes.append(f"{path}: removed an unfinished last line (a run was stopped mid-write)")
        data = data[:cut]
    for lineno, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            key, config = rec["key"], rec["config"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else _first_line(e)
            notes.append(f"{path}:{lineno}: not a result record ({why}), skipped")
            continue
        if config == chash:
            records.setdefault(key, rec)
    return records, notes


@contextlib.contextmanager
def _locked_append(path: Path) -> Iterator[Any]:
    """The results file opened for appending, held by this run alone."""
    with path.open("a", encoding="utf-8") as f:
        try:
            import fcntl

            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no advisory locks here: trust the user
            pass
        except OSError as e:
            raise RuntimeError(f"{path}: another run is writing to it") from e
        yield f


def _passage(u: Unit) -> str:
    """The passage a tool result holds: s0.. supporting, d0.. competing, '' otherwise."""
    key = u.extra.get("cib_passage") if u.kind == "tool_result" else None
    return key if isinstance(key, str) else ""


def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


__all__ = [
    "ARMS",
    "DEFAULT_BUCKETS",
    "Benchmark",
    "CIBConfig",
    "RunSummary",
    "Task",
    "read_results",
]
