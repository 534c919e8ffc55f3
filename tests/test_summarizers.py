"""Summarizers: the offline extractive one, and the SDK ones against a real loopback HTTP server."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs
from llm_server import LLMServer, Reply
from test_compressor import REAL

from winnow.serving.compressor import SemanticCompressor
from winnow.serving.strategies import error_excerpt
from winnow.serving.summarizers import AnthropicSummarizer, ExtractiveSummarizer, OpenAISummarizer
from winnow.serving.tokens import default_token_counter

COUNTER = default_token_counter()
LOG = "\n".join(
    [
        "$ go test ./...",
        *[f"=== RUN   TestCase{i}\n--- PASS: TestCase{i} (0.00s)" for i in range(40)],
    ]
    + [
        "--- FAIL: TestLockout (0.01s)",
        "    auth_test.go:42: expected 5 tries, got 6",
        "FAIL",
        "exit status 1",
    ]
)


def test_extractive_keeps_error_lines_and_ends_within_budget() -> None:
    out = ExtractiveSummarizer().summarize(LOG, 60)
    assert COUNTER.count(out) <= 60
    for line in (
        "--- FAIL: TestLockout (0.01s)",
        "    auth_test.go:42: expected 5 tries, got 6",
        "exit status 1",
    ):
        assert line in out.split("\n")
    assert out.startswith("$ go test ./...")
    assert "[... " in out and "lines]" in out


def test_extractive_leaves_short_text_alone() -> None:
    assert ExtractiveSummarizer().summarize("all 3 tests passed", 50) == "all 3 tests passed"
    assert ExtractiveSummarizer().summarize(["a", "b"], 50) == "a\n\nb"


def test_a_repeated_error_fills_the_budget_with_its_distinct_lines_first() -> None:
    """A log of one failure retried many times (an Aider session of one API error, 950K
    characters) filled 22% of its limit: the repeats come back once every distinct line is in."""
    attempt = [
        "Traceback (most recent call last):",
        '  File "client.py", line 143, in next',
        "litellm.APIConnectionError: Error parsing chunk: Expecting value",
        "Retrying in 0.2 seconds...",
    ]
    log = "\n".join(attempt * 200)
    distinct = ExtractiveSummarizer().summarize("\n".join(attempt), 10**6)
    small = ExtractiveSummarizer().summarize(log, COUNTER.count(distinct) + 8)
    for line in attempt:  # each distinct line before any repeat
        assert line in small.split("\n")
    budget = COUNTER.count(log) // 3
    out = ExtractiveSummarizer().summarize(log, budget)
    assert 0.9 * budget <= COUNTER.count(out) <= budget
    assert out.startswith(attempt[0]) and "[... " in out  # in order, the rest marked


def test_a_summary_of_paragraphs_fills_its_budget() -> None:
    """Lines apart by blank lines need no gap marker between them: counted as if they did, a
    3,859-token skill text summarized to 3,434 tokens came back at 2,870."""
    para = "\n\n".join(
        f"## Step {k}\n\nRun the check for part {k} and write what it found to notes/{k}.md."
        for k in range(120)
    )
    for budget in (300, 900, 1500):
        out = ExtractiveSummarizer().summarize(para, budget)
        assert 0.95 * budget <= COUNTER.count(out) <= budget


def test_a_summary_fills_its_budget_when_its_lines_are_few() -> None:
    """Whole lines can leave the end of the budget unused: a short line that took it left
    too little for any cut (a 64-token budget came back at 59), and a retry loop's long error,
    repeated, was never the line cut to fit (270 to 320 tokens all came back at 265)."""
    client_error = "\n".join(
        [
            "litellm.BadRequestError: LLM Provider NOT provided. Pass in the LLM provider you "
            "are trying to call. You passed model=Qwen/Qwen3-Coder",
            "Pass model as E.g. For 'Huggingface' inference endpoints pass in "
            "`completion(model='huggingface/starcoder',..)` Learn more: https://docs.litellm.ai/docs/providers",
            "https://docs.litellm.ai/docs/providers",
            "Open URL for more info? (Y)es/(N)o/(D)on't ask again [Yes]: y",
        ]
    )
    quota = (
        'litellm.RateLimitError: litellm.RateLimitError: VertexAIException - b\'[{\\n  "error": '
        '{\\n    "code": 429,\\n    "message": "Quota exceeded for aiplatform.googleapis.com/'
        "online_prediction_input_tokens_per_minute_per_base_model with base model: "
        'anthropic-claude-sonnet-4. Please submit a quota increase request.",\\n    "status": '
        '"RESOURCE_EXHAUSTED"\\n  }\\n}\\n]\''
    )
    retries = (
        "\n".join(
            f"{quota}\nThe API provider has rate limited you. Try again later.\nRetrying in {s} seconds..."
            for s in ("0.2", "0.5", "1.0")
        )
        + "\n\n\n^C again to exit\nCopied code context to clipboard.\n\n\n^C KeyboardInterrupt"
    )
    for text, budgets in ((client_error, range(58, 76)), (retries, range(250, 330, 10))):
        assert COUNTER.count(text) > max(budgets)
        for budget in budgets:
            out = ExtractiveSummarizer().summarize(text, budget)
            assert budget - 3 <= COUNTER.count(out) <= budget, budget


def test_error_lines_come_before_any_other_line() -> None:
    """A last line naming a path, a number, a conclusion and what comes up later outranked
    an error line: a summary with room for one line keeps the error."""
    log = "\n".join(
        ["bun test v1.2.10", *[f"ok {k}" for k in range(40)], "error: Session not found."]
        + [f"ok {k}" for k in range(40, 80)]
        + ["Total: 80 tests ran in src/session.test.ts (2.1s)"]
    )
    salient = frozenset({"src/session.test.ts"})
    out = ExtractiveSummarizer().summarize(log, 30, salient)
    assert "error: Session not found." in out


def test_a_tool_refusing_its_arguments_is_an_error() -> None:
    for refusal in ("cat: illegal option -- A", "ls: invalid option -- 'z'"):
        assert error_excerpt(f"{refusal}\nusage: cat [-belnstuv] [file ...]").startswith(refusal)
    assert error_excerpt("Options:\n  --foo  set the foo option") == ""


def test_wrapped_cli_errors_and_failure_marks_are_error_lines() -> None:
    """Errors the hand labels call errors that no cue saw (the compressor let them go when
    the classifier missed them on a project it had not seen)."""
    errors = [
        "Error starting session: A session for task #002 already exists: 'task#002'",
        "telemetry consent: huh: bubbletea: error opening TTY: open /dev/tty: no such device",
        "failed to get action: session fix prompt failed: huh: could not open TTY",
        "✗ resolveRepoPath > returns session repo path if session is given [0.23ms]",
        "❌ getCurrentSession returned null - not in a session workspace",
        "cd: no such file or directory: minsky",
        "test (ubuntu-latest)\tGolang CI\t2026-07-23T15:20:36.29Z ##[error]issues found",
        "base64: invalid input",
        "The LLM did not conform to the edit format.",
    ]
    for line in errors:
        assert error_excerpt(f"{line}\nedobry@linkslate minsky %").startswith(line), line
    for line in ("Error handling: we wrap errors", "## Error handling in Go", "✓ all passed"):
        assert error_excerpt(line) == "", line


def test_a_summary_holds_the_error_lines_an_error_note_holds() -> None:
    """A test run with more error lines than a note keeps: a summary the size of the note
    keeps the note's lines (the first ones and the last), though others name more paths;
    and a long error line stays one line, cut as the note cuts it, not split in sentences; a
    line failing again at the end is kept where the note keeps it; an indented source line
    quoted under an error (`     error:  5 | import ...`) is no error line for either."""
    long = "TypeError: db.addSession is not a function. (In 'db.addSession({" + "x" * 400 + "'"
    log = "\n".join(
        ["bun test v1.2.10", long]
        + [f"✗ Session > case {k} [0.{k}ms]\n     error:  {k} | import {{ join }} from 'path';" for k in range(45)]
        + [f"error: expect(received).toBe(expected) at src/session/case{k}.test.ts:{k}:7" for k in range(30)]
        + ["✗ Session > case 40 [0.40ms]", " 76 fail", "Ran 120 tests across 9 files. [1.52s]"]
    )  # fmt: skip
    note = error_excerpt(log)
    kept = [ln for ln in note.split("\n") if not ln.startswith("[... ")]
    assert kept[0].startswith("TypeError:") and len(kept) == 40
    out = ExtractiveSummarizer().summarize(log, COUNTER.count(note))
    for line in kept:
        assert line in out.split("\n"), line


def test_an_error_note_of_a_long_run_keeps_how_it_ended() -> None:
    """Of more error lines than a note holds, the first ones and the last: "1 error" at the
    end of a test run says more than the 41st failing test's name."""
    run = "\n".join(
        [f"✗ Session > case {k} [0.{k}ms]" for k in range(60)] + ["", " 60 fail", " 1 error"]
    )
    note = error_excerpt(run).split("\n")
    assert note[0] == "✗ Session > case 0 [0.0ms]" and note[-2:] == [" 60 fail", " 1 error"]
    assert len([ln for ln in note if not ln.startswith("[... ")]) == 40


def test_an_error_excerpt_holds_a_retried_error_once() -> None:
    retry = "litellm.APIError: APIError: OpenAIException - Your request was blocked."
    log = "\n".join(f"{retry}\nRetrying in {2**k / 4} seconds..." for k in range(9))
    assert error_excerpt(log).split("\n") == [retry, "[... 17 lines]"]


@settings(max_examples=60, deadline=None)
@given(text=hs.text(min_size=0, max_size=3000), budget=hs.integers(0, 200))
def test_extractive_never_exceeds_the_budget(text: str, budget: int) -> None:
    assert COUNTER.count(ExtractiveSummarizer().summarize(text, budget)) <= budget


@pytest.mark.parametrize("cls", [AnthropicSummarizer, OpenAISummarizer])
def test_llm_summarizer_over_the_wire(cls) -> None:
    with LLMServer(replies=["TestLockout fails: auth_test.go:42 expected 5 tries, got 6."]) as srv:
        url = srv.base_url if cls is AnthropicSummarizer else srv.openai_base_url
        s = cls(model="test-model", base_url=url, api_key="test", max_retries=0)
        out = s.summarize(LOG, 60)
        assert out == "TestLockout fails: auth_test.go:42 expected 5 tries, got 6."
        (req,) = srv.requests
    body = req.body
    assert body["model"] == "test-model" and body["max_tokens"] == 60
    if cls is AnthropicSummarizer:
        assert req.api == "anthropic" and "Quote error lines verbatim" in body["system"]
        user = body["messages"][0]["content"]
    else:
        assert req.api == "openai" and body["messages"][0]["role"] == "system"
        user = body["messages"][1]["content"]
    assert "--- FAIL: TestLockout (0.01s)" in user


@pytest.mark.parametrize("cls", [AnthropicSummarizer, OpenAISummarizer])
def test_llm_answer_over_budget_is_trimmed(cls) -> None:
    long = "\n".join(f"point {i}: src/mod{i}.py changed" for i in range(100))
    with LLMServer(replies=[long]) as srv:
        url = srv.base_url if cls is AnthropicSummarizer else srv.openai_base_url
        out = cls(base_url=url, api_key="test", max_retries=0).summarize(LOG, 40)
    assert COUNTER.count(out) <= 40 and out.startswith("point 0")


@pytest.mark.parametrize("cls", [AnthropicSummarizer, OpenAISummarizer])
def test_llm_failure_falls_back_or_raises(cls) -> None:
    with LLMServer(replies=[Reply(text="overloaded", status=529)]) as srv:
        url = srv.base_url if cls is AnthropicSummarizer else srv.openai_base_url
        s = cls(base_url=url, api_key="test", max_retries=0)
        out = s.summarize(LOG, 60)
        assert s.failures == 1 and "--- FAIL: TestLockout (0.01s)" in out  # the extractive summary
        strict = cls(base_url=url, api_key="test", max_retries=0, fallback=None)
        with pytest.raises(Exception, match="overloaded"):
            strict.summarize(LOG, 60)


def test_compressor_with_an_llm_summarizer() -> None:
    units = REAL["openhands"]
    with LLMServer(replies=["[summary]"]) as srv:
        summarizer = OpenAISummarizer(base_url=srv.openai_base_url, api_key="test", max_retries=0)
        comp = SemanticCompressor(classifier=object(), summarizer=summarizer)
        result = comp.compress(units, 3000)
        calls = len(srv.requests)
    assert result.tokens_after <= 3000
    summarized = [u for u in result.units if u.extra.get("strategy") == "summarize"]
    # a tool call stays JSON (its long values summarized in line); an error keeps its error
    # lines verbatim ahead of the model's summary
    texts = [u.text for u in summarized if u.kind != "tool_call"]
    assert texts and all(t.endswith("[summary]") for t in texts)
    # every summary paid for is in the output
    assert calls == summarizer.calls == len(texts) and summarizer.failures == 0
