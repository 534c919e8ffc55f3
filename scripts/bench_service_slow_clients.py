"""The service's memory under stalled uploads: old code vs this checkout, same run.

    .venv/bin/python scripts/bench_service_slow_clients.py [--ref 64fead8] [--clients 20]

Starts `winnow serve` on a loopback port (the old code from `git archive REF`, then this
checkout), opens `--clients` connections that each declare a body just under the 8 MiB limit,
send `--mib` MiB of it and then stall, and samples the server's resident memory (VmRSS) and
the connections it has answered and closed: before, while they stall, and after the body
timeout (30 s by default) has passed.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "64fead8"  # main before issue 14's hardening


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def stalled_upload(port: int, mib: float, answers: list[bytes], sockets: list) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    sockets.append(s)
    head = (
        f"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {8 * 1024 * 1024 - 1}\r\n\r\n"
    ).encode()
    try:
        s.sendall(head + b'{"units": [{"role": "user", "kind": "text", "text": "')
        s.sendall(b"x" * int(mib * 1024 * 1024))  # then nothing more
        answers.append(s.recv(200))  # a refusal or a timeout, if the server gives one
    except OSError:
        answers.append(b"(reset)")


def measure(root: Path, label: str, clients: int, mib: float, wait_after: float) -> None:
    port = free_port()
    code = f"from winnow.cli import main; main(['serve', '--port', '{port}'])"
    env = {**os.environ, "PYTHONPATH": str(root)}
    server = subprocess.Popen(
        [sys.executable, "-c", code], env=env, cwd=root,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"bench: {label} server did not start") from None
                time.sleep(0.2)
        base = rss_mib(server.pid)
        answers: list[bytes] = []
        sockets: list = []
        threads = [
            threading.Thread(target=stalled_upload, args=(port, mib, answers, sockets), daemon=True)
            for _ in range(clients)
        ]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        samples = []
        for at in (2, 5, 10, 20, wait_after):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            samples.append((at, rss_mib(server.pid), len(answers)))
        kinds = sorted({a.split(b"\r\n")[0].decode(errors="replace") for a in answers})
        print(f"{label}: RSS {base:.0f} MiB before; {clients} uploads of {mib:g} MiB stalled")
        for at, rss, n in samples:
            print(f"  t+{at:>4.0f} s: RSS {rss:6.0f} MiB ({rss - base:+5.0f}), {n} answered")
        print(f"  answers: {', '.join(kinds) or 'none'}")
        for s in sockets:
            s.close()
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:  # uvicorn waits for open requests to end
            server.kill()
            server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=BEFORE, help="git revision of the old code")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--mib", type=float, default=7.0, help="MiB each client sends")
    parser.add_argument("--after", type=float, default=36.0, help="last sample, s")
    args = parser.parse_args()
    archive = subprocess.run(["git", "archive", args.ref, "winnow"], cwd=ROOT, capture_output=True)
    if archive.returncode:
        raise SystemExit(f"bench: git archive {args.ref}: {archive.stderr.decode()}")
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(tmp)
        # the old tree has no model: it loads the shipped one from this checkout's models/
        os.symlink(ROOT / "models", Path(tmp) / "models")
        measure(Path(tmp), f"old ({args.ref})", args.clients, args.mib, args.after)
    measure(ROOT, "new", args.clients, args.mib, args.after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
