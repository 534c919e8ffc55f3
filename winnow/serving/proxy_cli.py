"""`winnow proxy` and `winnow proxy report`: the command line of winnow.serving.proxy."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from winnow.cli import port

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _add_proxy(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="proxy_command", metavar="[report]")
    rep = sub.add_parser(
        "report",
        help="tokens saved and the cache-read share per conversation, from an --audit folder",
        description="Tokens saved and the cache-read share per conversation, from an --audit "
        "folder.",
    )
    rep.add_argument("audit", metavar="DIR", help="the --audit folder (or one audit file)")
    p.add_argument("--upstream", help="the API to forward to, e.g. https://api.anthropic.com")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    p.add_argument(
        "--port", type=port, default=8787, help="0: any free port (default: %(default)s)"
    )
    p.add_argument(
        "--budget",
        help="tokens the request may hold before its history is compressed: a count (80000) or "
        "a share of --window (40%%); default: $HARNESS_CTX_THRESHOLD %% (40) of --window",
    )
    p.add_argument(
        "--window",
        type=int,
        default=200_000,
        help="the model's context window in tokens (default: %(default)s)",
    )
    p.add_argument(
        "--idle",
        action="store_true",
        help="compact a conversation while its user is away, before its prompt cache expires "
        "(archives go to --audit DIR, else .winnow/proxy)",
    )
    p.add_argument("--audit", metavar="DIR", help="append one JSON line per request to DIR")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the upstream's next bytes (default: %(default)s)",
    )


def _fail(message: str) -> int:
    print(f"winnow proxy: {message}", file=sys.stderr)
    return 1


def _run_proxy(args: argparse.Namespace) -> int:
    if args.proxy_command == "report":
        return _report(args.audit)
    if not args.upstream:
        return _fail("--upstream URL is required (e.g. https://api.anthropic.com)")
    if not args.upstream.startswith(("http://", "https://")):
        return _fail(f"--upstream must be an http(s) URL, not {args.upstream!r}")
    if not args.timeout > 0:
        return _fail(f"--timeout must be a positive number of seconds, not {args.timeout}")
    if args.audit:
        from winnow.cli import check_output

        check_output(args.audit, folder=True)
    try:
        import uvicorn

        from winnow.serving.proxy import ProxyConfig, create_app
    except ModuleNotFoundError as e:
        return _fail(f"{e.name} is missing: pip install 'winnow[serve]'")
    config = ProxyConfig(
        upstream=args.upstream,
        host=args.host,
        port=args.port,
        budget=args.budget,
        window=args.window,
        idle=args.idle,
        audit_dir=args.audit,
        timeout_s=args.timeout,
    )
    try:
        budget = config.budget_tokens()
    except ValueError as e:
        return _fail(f"--budget / --window: {e}")
    try:  # bound here, so that the line below names the port taken (--port 0 picks one)
        sock = _listen(args.host, args.port)
    except OSError as e:
        return _fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    bound = config.port = sock.getsockname()[1]
    if not _is_loopback(args.host):
        print(
            f"winnow proxy: warning: listening on {args.host}: anyone who reaches it can send "
            "requests through it; prefer 127.0.0.1",
            file=sys.stderr,
        )
    import logging

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(
        f"winnow proxy: http://{args.host}:{bound} -> {config.upstream}; budget "
        f"{budget:,} tokens{'; idle compaction' if args.idle else ''}"
        f"{f'; audit in {args.audit}' if args.audit else ''}",
        file=sys.stderr,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host=args.host,
            port=bound,
            log_level="warning",
            server_header=False,
            date_header=False,
        )
    )
    server.run(sockets=[sock])
    return 0


def _listen(host: str, number: int) -> socket.socket:
    """A TCP socket bound to (host, number), as uvicorn binds one."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, number))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _report(path: str) -> int:
    from rich.console import Console
    from rich.table import Table

    from winnow.serving.proxy_audit import read_audit, report

    p = Path(path).expanduser()
    if not p.exists():
        return _fail(f"report: {p}: no such file or folder")
    problems: list[str] = []
    rows = report(read_audit(p, problems))
    console = Console()
    if not rows:
        console.print(f"{p}: no requests audited", markup=False)
    else:
        table = Table(header_style="bold", box=None, pad_edge=False)
        table.add_column("conversation", no_wrap=True, min_width=12)
        for col in ("requests", "compressed", "tokens in", "sent", "saved", "cache reads"):
            table.add_column(col, justify="right", no_wrap=True)
        for r in rows:
            table.add_row(
                r.conversation,
                f"{r.requests:,}",
                f"{r.compressions:,}",
                f"{r.tokens_in:,}",
                f"{r.tokens_out:,}",
                f"{r.saved:.0%}",
                f"{r.cache_read_share:.0%}",
            )
        tin, tout = sum(r.tokens_in for r in rows), sum(r.tokens_out for r in rows)
        read = sum(r.cache_read for r in rows)
        total = sum(r.input_tokens + r.cache_read + r.cache_write for r in rows)
        table.add_row(
            "[bold]all",
            f"{sum(r.requests for r in rows):,}",
            f"{sum(r.compressions for r in rows):,}",
            f"{tin:,}",
            f"{tout:,}",
            f"{1 - tout / tin:.0%}" if tin else "-",
            f"{read / total:.0%}" if total else "-",
        )
        console.print(table)
        console.print(
            "compressed: requests whose history was compressed anew (the others reuse its bytes); "
            "tokens in / sent: winnow's count of what clients sent and of what went upstream; "
            "cache reads: the upstream's cache reads over all its input tokens",
            soft_wrap=True,
        )
    for line in problems:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0


COMMANDS = {
    "proxy": (
        "an API proxy that keeps an agent's context under a budget (`winnow proxy report DIR`: "
        "what it saved)",
        _add_proxy,
        _run_proxy,
    ),
}
