"""Is idle compaction worth it? An expected-value model per provider cache profile.

All costs are in base-input-token equivalents (tokens x multiplier of the base input price),
so one formula serves every provider. For a session of T tokens, compacted to C tokens with
a summary of S output tokens, and a profile with cached-read multiplier r, cold-prefill
multiplier w (the cache-write multiplier, or 1.0 where the provider has no write premium)
and output multiplier o:

    compaction cost  K = r*T + o*S        read the warm T from cache, write the S summary
    saving on resume V = w*T - w*C        the cold prefill of T avoided, less that of C
    break-even       p* = K / V           compaction pays when P(resume after TTL) > p*
    expected value   EV(p) = p*V - K

For T=250K, C=19K, S=5K: a steep cliff (r=0.1, w=1.25, o=5) gives p* = 17.3%; a shallow one
(r=0.5, w=1.0, o=4) gives p* = 62.8%.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILES", "CacheProfile", "Estimate", "estimate", "profile_for"]


@dataclass(frozen=True)
class CacheProfile:
    """A provider's prompt-cache prices (multiples of its base input price) and TTL."""

    name: str
    read: float  # cached-read multiplier
    write: float  # cold prefill multiplier: the cache-write price (1.0: no write premium)
    output: float  # output multiplier
    ttl_s: int  # how long a cached prefix stays warm after its last use


PROFILES: dict[str, CacheProfile] = {
    p.name: p
    for p in (
        CacheProfile("anthropic-5m", read=0.1, write=1.25, output=5.0, ttl_s=300),
        CacheProfile("anthropic-1h", read=0.1, write=2.0, output=5.0, ttl_s=3600),
        CacheProfile("openai-gpt-4o", read=0.5, write=1.0, output=4.0, ttl_s=300),
        CacheProfile("openai-gpt-4.1", read=0.25, write=1.0, output=4.0, ttl_s=300),
        CacheProfile("openai-gpt-5", read=0.1, write=1.0, output=8.0, ttl_s=300),
    )
}


def profile_for(model: str, *, long_ttl: bool = False) -> CacheProfile:
    """The profile for a model name and cache setting (Anthropic's 1 h cache when `long_ttl`)."""
    m = model.lower()
    if "claude" in m or m.startswith("anthropic"):
        return PROFILES["anthropic-1h" if long_ttl else "anthropic-5m"]
    if m.startswith("gpt-5") or m.startswith("o3") or m.startswith("o4"):
        return PROFILES["openai-gpt-5"]
    if m.startswith("gpt-4.1"):
        return PROFILES["openai-gpt-4.1"]
    return PROFILES["openai-gpt-4o"]


@dataclass(frozen=True)
class Estimate:
    """The model's figures for one profile (token equivalents, probabilities in 0..1)."""

    profile: CacheProfile
    cost: float
    saving: float
    break_even: float  # inf when compaction can never pay (no saving)

    def expected_value(self, resume_probability: float) -> float:
        return resume_probability * self.saving - self.cost

    def worth_it(self, resume_probability: float) -> bool:
        return self.expected_value(resume_probability) > 0


def estimate(tokens: int, compacted: int, summary: int, profile: CacheProfile) -> Estimate:
    """Cost, saving and break-even resume probability of compacting `tokens` to `compacted`."""
    cost = profile.read * tokens + profile.output * summary
    saving = profile.write * (tokens - compacted)
    return Estimate(profile, cost, saving, cost / saving if saving > 0 else float("inf"))
