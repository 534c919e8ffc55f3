"""The README's headline command on every session file of the traces, checked.

    python scripts/check_headline.py                       # ../shared/traces, --limit 30%
    python scripts/check_headline.py --limit 20% --no-cache

Runs `winnow compress FILE --limit 30% --to anthropic --cache -o out.json` (a folder for a file
that holds several sessions) on every transcript file, in this process, and checks each body
it writes: accepted by tests/api_validate.py, within the session's limit as sent (the body
read back by the readers and counted), and how much of the limit it uses. Prints every
failure and the distribution of the share used.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=ROOT.parent / "shared" / "traces")
    ap.add_argument("--limit", default="30%")
    ap.add_argument("--no-cache", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    logging.getLogger("winnow").setLevel(logging.ERROR)
    from api_validate import validate_anthropic

    from winnow.cli import main as cli
    from winnow.data.readers import detect_format, iter_files, read_paths
    from winnow.serving.compressor import resolve_limit
    from winnow.serving.tokens import default_token_counter, read_back, sent_tokens, unit_tokens

    counter = default_token_counter()
    files = [f for f in iter_files([args.traces]) if f.stat().st_size and detect_format(f)]
    failures: list[str] = []
    left_out: list[str] = []
    under: list[str] = []
    shares: list[float] = []
    sessions = 0
    start = time.perf_counter()
    for f in files:
        by_session: dict[str, list] = defaultdict(list)
        for u in read_paths([f]):
            by_session[u.session_id].append(u)
        with tempfile.TemporaryDirectory() as tmp:
            several = len(by_session) > 1
            out = Path(tmp) / ("out" if several else "out.json")
            argv = ["compress", str(f), "--limit", args.limit, "--to", "anthropic", "-o"]
            argv += [str(out) + ("/" if several else "")] + ([] if args.no_cache else ["--cache"])
            err = io.StringIO()
            out_text = io.StringIO()
            with contextlib.redirect_stdout(out_text), contextlib.redirect_stderr(err):
                rc = cli(argv)
            said = err.getvalue() + out_text.getvalue()
            if rc != 0:
                failures.append(f"{f}: exit {rc}: {err.getvalue().strip().splitlines()[-1:]}")
                continue
            for sid, units in by_session.items():
                name = re.sub(r"[^A-Za-z0-9._-]+", "_", sid).strip("._") or "session"
                body_path = out / f"{name}.json" if several else out
                if not body_path.is_file():
                    named = (f"session {sid}: nothing is left", f"session {sid}: no user or")
                    if any(n in said for n in named):  # a few tokens, or no message: said
                        left_out.append(f"{f} [{sid}]")
                    else:
                        failures.append(f"{f} [{sid}]: no body written")
                    continue
                sessions += 1
                body = json.loads(body_path.read_text())
                limit = resolve_limit(args.limit, sent_tokens(units, "anthropic", counter))
                assert limit is not None
                sent = sum(unit_tokens(u, counter) for u in read_back(body, "anthropic"))
                problems = validate_anthropic(body)
                if problems:
                    failures.append(f"{f} [{sid}]: invalid: {problems[:2]}")
                if sent > limit:
                    failures.append(f"{f} [{sid}]: {sent:,} tokens over the limit {limit:,}")
                shares.append(sent / limit)
                if sent < 0.9 * limit:
                    under.append(f"{f} [{sid}]: {sent:,} of {limit:,} tokens ({sent / limit:.0%})")
    shares.sort()
    print(
        f"{len(files)} files, {sessions} sessions, --limit {args.limit}"
        f"{'' if args.no_cache else ' --cache'}: {len(failures)} failures "
        f"({time.perf_counter() - start:.0f} s)"
    )
    for line in failures:
        print("  " + line)
    if left_out:
        print(
            f"{len(left_out)} session(s) with no message to send under the limit (a few tokens, "
            "or none but start-up notes) left out, each with a line saying so:"
        )
        for line in left_out:
            print("  " + line)
    if shares:
        below = sum(s < 0.9 for s in shares)
        print(
            f"share of the limit used: lowest {shares[0]:.1%}, median "
            f"{shares[len(shares) // 2]:.1%}; {below} session(s) under 90% "
            f"(sessions already under the limit are sent whole)"
        )
        for line in under:
            print("  " + line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
