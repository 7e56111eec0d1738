"""How long the controller's event loop takes to answer while a core decides in the
thread, at CPython's default switch interval (5 ms) and at a shorter one (``--interval``).

    .venv/bin/python benchmarks/switch_interval.py [--interval 0.001] [--queued 10000]
        [--seconds 20] [--busy 1] [--no-write]

Why: in three 10,000 AppWrapper runs on the test bed (2026-11-29), mcad's /metrics went
unanswered for 2-5 s while a full core decided in its thread (py-spy: the loop waiting
for the interpreter, the deciding thread holding it). The loop gives the interpreter up
at every socket call and select, and asks for it back; at the default interval it waits
up to 5 ms each time while the thread computes, and a reply takes many such calls.
A shorter interval was tried (``sys.setswitchinterval``) and not adopted: see
docs/benchmarks.md, "eighth stop".

What it runs, in this one process: an aiohttp server on 127.0.0.1 answering a 60 kB
page (about mcad's /metrics), and a thread deciding the benchmark's 10,000-queued
snapshot (``dispatch_cycle.build_snapshot``: the full cycle, again and again, as the
deciding thread does through a drain). A client in a process of its own asks for the
page every 50 ms and times each answer. ``--busy N`` adds N processes that only spin,
as the test bed's API servers keep this machine's cores busy. Each interval is measured
in turn, twice (5 ms, 1 ms, 5 ms, 1 ms). Writes the figures to docs/benchmarks.md's
"Switch interval" section unless --no-write.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request
from datetime import date
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bedtools import write_section  # noqa: E402
from benchmarks.dispatch_cycle import build_snapshot  # noqa: E402
from mcad.core.cycle.carried import CarriedCycle  # noqa: E402

PAGE = b"# a metric line of about mcad's /metrics page\n" * 1300
"""About 60 kB, as mcad's /metrics with 3 clusters and a few quota nodes."""
ASK_EVERY_S = 0.05
SECTION = "Switch interval (the event loop beside the deciding thread)"
"""Its heading in docs/benchmarks.md (``bedtools.write_section`` replaces it)."""


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def spin(stop_at: float) -> None:
    """A process that only keeps a core busy until ``stop_at`` (wall clock)."""
    while time.time() < stop_at:
        sum(range(10_000))


def client(port: int, seconds: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Ask for the page every ``ASK_EVERY_S`` for ``seconds``; put the answer times."""
    times: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
                r.read()
            times.append(time.monotonic() - started)
        except OSError:
            times.append(30.0)
        time.sleep(max(0.0, ASK_EVERY_S - (time.monotonic() - started)))
    out.put(times)


async def measure(interval: float, seconds: float, queued: int, busy: int) -> dict[str, float]:
    """Answer times (seconds) of the page while the thread decides, at ``interval``."""
    snapshot = build_snapshot(queued=queued)
    stop = threading.Event()
    cycles = [0]

    def decide() -> None:
        while not stop.is_set():
            CarriedCycle().decide(snapshot)  # a full cycle each time, as in a drain
            cycles[0] += 1

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    before = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    spinners = [multiprocessing.Process(target=spin, args=(time.time() + seconds + 2,))
                for _ in range(busy)]
    for p in spinners:
        p.start()
    thread = threading.Thread(target=decide, name="dispatch cycle", daemon=True)
    thread.start()
    out: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    asker = multiprocessing.Process(target=client, args=(port, seconds, out))
    asker.start()
    try:
        times = await asyncio.to_thread(out.get)  # the loop serves meanwhile
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
        asker.join()
        for p in spinners:
            p.join()
        sys.setswitchinterval(before)
        await runner.cleanup()
    times.sort()
    return {"interval_ms": interval * 1000, "answers": len(times),
            "p50_ms": 1000 * statistics.median(times),
            "p90_ms": 1000 * times[int(len(times) * 0.9)],
            "p99_ms": 1000 * times[min(len(times) - 1, int(len(times) * 0.99))],
            "max_ms": 1000 * times[-1], "cycles": cycles[0]}


def render(rows: list[dict[str, float]], args: argparse.Namespace) -> str:
    lines = [f"## {SECTION}", "",
             f"Measured on {date.today()} by `python benchmarks/switch_interval.py --interval "
             f"{args.interval} --queued "
             f"{args.queued} --seconds {args.seconds:.0f} --busy {args.busy}` "
             f"({platform.machine()}, {os.cpu_count()} cores): an aiohttp server "
             "answering a 60 kB page on the event loop, while a thread decides the full "
             "cycle over the dispatch-cycle benchmark's "
             f"{args.queued:,}-queued snapshot again and again; a client process asks every "
             f"50 ms; {args.busy} more process(es) keep cores busy, as the test bed's API "
             "servers do. In turn, twice.", "",
             "| switch interval | answers | p50 | p90 | p99 | max | cores decided |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['interval_ms']:g} ms | {r['answers']:.0f} | {r['p50_ms']:.1f} ms "
                     f"| {r['p90_ms']:.1f} ms | {r['p99_ms']:.1f} ms | {r['max_ms']:.1f} ms "
                     f"| {r['cycles']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.001,
                        help="the switch interval measured against the default 5 ms")
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--busy", type=int, default=1)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rows = []
    for interval in (0.005, args.interval, 0.005, args.interval):
        say(f"switch interval {interval * 1000:.0f} ms: {args.seconds:.0f} s of answers "
            "while the thread decides")
        row = asyncio.run(measure(interval, args.seconds, args.queued, args.busy))
        say(f"  p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, max "
            f"{row['max_ms']:.1f} ms over {row['answers']:.0f} answers; "
            f"{row['cycles']:.0f} cores decided")
        rows.append(row)
    section = render(rows, args)
    print(section)
    if not args.no_write:
        write_section(SECTION, section)
        say("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
