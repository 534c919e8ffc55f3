"""The baselines winnow's compressor is measured against: oldest-first truncation and
observation masking, both under the same token limit.

    truncate_oldest(units, limit)        # keep the newest units that fit
    mask_observations(units, limit)      # old tool results become a placeholder, then truncate

Both keep tool pairs valid: a result whose call fell off the front goes too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from winnow.data.schema import Unit
from winnow.serving.strategies import RESULT_PLACEHOLDER
from winnow.serving.tokens import TokenCounter, default_token_counter, unit_tokens

MASK_WINDOW = 10  # tool results kept whole by observation masking: the newest ten


def truncate_oldest(
    units: Sequence[Unit], limit: int, counter: TokenCounter | None = None
) -> list[Unit]:
    """Keep the newest units that fit `limit` tokens; drop a result whose call fell off the front."""
    counter = counter or default_token_counter()
    kept: list[Unit] = []
    total = 0
    for u in reversed(units):
        n = unit_tokens(u, counter)
        if total + n > limit:
            break
        kept.append(u)
        total += n
    kept.reverse()
    calls = {u.call_id for u in kept if u.kind == "tool_call"}
    had_call = {u.call_id for u in units if u.kind == "tool_call"}
    return [
        u
        for u in kept
        if not (u.kind == "tool_result" and u.call_id in had_call and u.call_id not in calls)
    ]


def mask_observations(
    units: Sequence[Unit],
    limit: int,
    counter: TokenCounter | None = None,
    window: int = MASK_WINDOW,
) -> list[Unit]:
    """Observation masking: all but the newest `window` tool results become a placeholder, then
    oldest-first truncation if that is not enough."""
    results = [i for i, u in enumerate(units) if u.kind == "tool_result"]
    old = set(results[:-window]) if len(results) > window else set()
    masked = [
        dataclasses.replace(
            u,
            text=RESULT_PLACEHOLDER,
            extra={
                **{k: v for k, v in u.extra.items() if k != "raw"},  # contract C1: text rewritten
                "strategy": "placeholder",
            },
        )
        if i in old
        else u
        for i, u in enumerate(units)
    ]
    return truncate_oldest(masked, limit, counter)


__all__ = ["MASK_WINDOW", "mask_observations", "truncate_oldest"]
