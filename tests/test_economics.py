"""The expected-value model of idle compaction reproduces the seed's break-even figures."""

from __future__ import annotations

import pytest

from winnow.cli import main
from winnow.runtime.economics import PROFILES, CacheProfile, estimate, profile_for

STEEP = CacheProfile("steep", read=0.1, write=1.25, output=5.0, ttl_s=300)
SHALLOW = CacheProfile("shallow", read=0.5, write=1.0, output=4.0, ttl_s=300)


def test_seed_table_from_one_formula():
    steep = estimate(250_000, 19_000, 5_000, STEEP)
    shallow = estimate(250_000, 19_000, 5_000, SHALLOW)
    # cost = 0.1*250K + 5*5K; saving = 1.25*(250K - 19K)
    assert (steep.cost, steep.saving) == (50_000, 288_750)
    assert steep.break_even == pytest.approx(0.1732, abs=1e-4) and steep.break_even > 0.17
    # cost = 0.5*250K + 4*5K; saving = 1.0*(250K - 19K)
    assert (shallow.cost, shallow.saving) == (145_000, 231_000)
    assert round(shallow.break_even * 100) == 63


def test_expected_value_sign_flips_at_break_even():
    e = estimate(250_000, 19_000, 5_000, STEEP)
    assert not e.worth_it(e.break_even - 0.01) and e.worth_it(e.break_even + 0.01)
    assert e.expected_value(1.0) == pytest.approx(e.saving - e.cost)
    never = estimate(10_000, 10_000, 500, STEEP)
    assert never.break_even == float("inf") and not never.worth_it(1.0)


def test_profiles_follow_model_and_cache_setting():
    assert profile_for("claude-sonnet-4-5") is PROFILES["anthropic-5m"]
    assert profile_for("claude-opus-4-1", long_ttl=True).ttl_s == 3600
    assert profile_for("gpt-4o-mini").read == 0.5
    assert profile_for("gpt-5-codex").output == 8.0


def test_economics_command_prints_table(capsys):
    assert main(["economics", "--resume-probability", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "17.3%" in out and "62.8%" in out and "+36,625" in out and "-75,700" in out


def test_economics_custom_profile(capsys):
    assert main(["economics", "--custom", "0.5/1/4"]) == 0
    out = capsys.readouterr().out
    assert "custom" in out and "62.8%" in out and "anthropic-5m" not in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--custom", "0.1/fast"],
        ["--custom", "0.1/1.25/5/300/9"],
        ["--tokens", "lots"],
        ["--resume-probability", "1.5"],
        ["--compacted", "300000"],
        ["--profile", "nope"],
    ],
)
def test_economics_bad_input_is_one_line(argv, capsys):
    assert main(["economics", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("winnow economics:") and "\n" not in err
