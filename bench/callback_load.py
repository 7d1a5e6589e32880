"""Feedback callback load: signed, encrypted `card.action.trigger` feedback clicks against a
running Daphne, at several concurrency levels, next to a trivial JSON view on the same server.

    .venv/bin/python bench/callback_load.py                       # SQLite (fresh file in var/)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardloop_fb \\
        .venv/bin/python bench/callback_load.py [--requests 300] [--levels 1 8 32]

What is measured:
- `--processes N` Daphne processes (default 1; `cardloop.webserver` on `cardloop.asgi:application`,
  each on its own SO_REUSEPORT socket of one ephemeral port on 127.0.0.1, as
  `manage.py serve --web-processes N` runs them), DEBUG off, log level WARNING, no workers;
- clicks: every request is a different final-answer delivery (created beforehand through
  `feedback.deliveries.deliver` with a dry-run bot) clicked by its requester with the card's
  first state, so each one does the whole job: decrypt + verify the signature, dedupe the
  `event_id`, lock the delivery, append a revision, move LatestFeedback (analytics triggers
  included), write the `feedback.revised` event, queue the CardKit element update, answer a
  toast and release the held update after the answer. Every answer is checked (200 + success
  toast), and the database must hold exactly one revision per click afterwards;
- PostgreSQL: `VACUUM ANALYZE` after the deliveries were created, before the clock starts
  (an empty database per run gives the steadiest numbers; rows of earlier runs stay);
- trivial view: `GET /healthz` (a sync Django view answering `{"status": "ok"}`) on the same
  server, same client, same concurrency;
- the client (`--client raw`, the default) is N asyncio tasks, each on its own keep-alive
  HTTP/1.1 connection, sending its next prepared request when the previous one was answered
  (about 0.2 ms of CPU per request; `--client httpx`, one `httpx.AsyncClient`, takes ~2.5 ms,
  which on a 2-core machine is CPU the server does not get); latency is per request (send →
  full answer), throughput is answered requests / wall time of the level. The server's CPU
  per request (user + system of every Daphne thread, from /proc, ÷ answered requests) is
  printed beside it: the machine's other load moves it far less than throughput. Payloads
  are sealed before the clock starts. Each level is bounded by `--requests` and `--max-seconds`; before the first,
  100 clicks and 100 `/healthz` at the highest concurrency warm every process up (threads,
  pooled connections). `--json` adds p90 / p95 / max. `--outside-load N` runs N busy-looping
  processes beside the server during the measurement (the machine's other work, reproducibly).
Client and server share the machine (and its cores) — and so do the other engineers' runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import verdict
from benchdb import ensure_database
from clicks import feedback_click_payload
from webprocs import WebProcesses

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP_ID = "cli_bench_callbacks"
ENCRYPT_KEY = "bench-encrypt-key"
VERIFICATION_TOKEN = "vt_bench_token"
WARM_UP_CLICKS = 100


def configure(tmp: str) -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": "cardloop.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "CARDLOOP_SECRET_DIR": os.path.join(tmp, "secrets"),
        "CARDLOOP_LARK_DRY_RUN": "true",
        "CARDLOOP_LOG_LEVEL": "WARNING",
        "DJANGO_SILENCED_SYSTEM_CHECKS": "cardloop.W001,staticfiles.W004,security.W004,security.W008",
    }
    if not os.environ.get("DATABASE_URL"):
        db = ROOT / "var" / "bench_callbacks.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.update(env)
    return {**os.environ, **env}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


class _Answer:
    """What a check function sees of an answer: `status_code`, `content` (bytes), `.text`, `.json()`."""

    def __init__(self, status_code: int, content: bytes):
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


class _RawConnection:
    """One keep-alive HTTP/1.1 connection that sends prepared request bytes and reads one
    answer with a Content-Length body (Daphne sends one for these two routes). About a tenth
    of httpx's CPU per request, so the load generator takes less of the server's cores."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def request(self, raw: bytes) -> _Answer:
        for attempt in (1, 2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.writer.write(raw)
            try:
                head = await self.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close()  # the server closed a kept-alive connection: once more, anew
                if attempt == 2:
                    raise
                continue
            lines = head.split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            length = 0
            keep_alive = True
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    keep_alive = False
            body = await self.reader.readexactly(length)
            if not keep_alive:
                self.close()
            return _Answer(status, body)
        raise AssertionError("unreachable")

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _raw_request(host: str, method: str, path: str, body: bytes | None, headers: dict) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


async def run_level(
    base: str, requests: list[tuple], concurrency: int, max_seconds: float, client: str = "raw"
):
    """Send `requests` ((method, path, body, headers, check)) with `concurrency` tasks, each on
    its own keep-alive connection; `client` "raw" (prepared bytes on asyncio streams) or
    "httpx" (one `httpx.AsyncClient`)."""
    import httpx

    host_port = base.split("://", 1)[1]
    host, port = host_port.rsplit(":", 1)
    latencies: list[float] = []
    failures: list[str] = []
    if client == "raw":
        queue = [
            (_raw_request(host_port, method, path, body, headers), check)
            for method, path, body, headers, check in reversed(requests)
        ]
    else:
        queue = list(reversed(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30, trust_env=False) as http:
        deadline = time.perf_counter() + max_seconds

        async def worker():
            connection = _RawConnection(host, int(port))
            try:
                while queue and time.perf_counter() < deadline:
                    if client == "raw":
                        raw, check = queue.pop()
                        started = time.perf_counter()
                        response = await connection.request(raw)
                    else:
                        method, path, body, headers, check = queue.pop()
                        started = time.perf_counter()
                        response = await http.request(method, path, content=body, headers=headers)
                    latencies.append(time.perf_counter() - started)
                    problem = check(response)
                    if problem:
                        failures.append(problem)
            finally:
                connection.close()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "p90_ms": round(percentile(latencies, 90) * 1000, 1),
        "p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "max_ms": round(max(latencies, default=0) * 1000, 1),
        "req_per_s": round(len(latencies) / wall, 1) if wall else 0.0,
    }


def _cpu_per_request(before: float | None, after: float | None, requests: int) -> float | None:
    """Server CPU milliseconds per answered request between two `WebProcesses.cpu_seconds`
    readings (None without /proc or without requests)."""
    if before is None or after is None or not requests:
        return None
    return round((after - before) * 1000 / requests, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="per level and kind")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--max-seconds", type=float, default=60.0, help="per level and kind")
    parser.add_argument(
        "--pool-max-size",
        default=os.environ.get("DATABASE_POOL_MAX_SIZE", "16"),
        help="PostgreSQL: DATABASE_POOL_MAX_SIZE of the server process (default 16)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="Daphne processes sharing the listening socket (default 1)",
    )
    parser.add_argument(
        "--client",
        choices=["raw", "httpx"],
        default="raw",
        help="load generator: prepared bytes on asyncio streams (default) or httpx",
    )
    parser.add_argument(
        "--outside-load",
        type=int,
        default=0,
        metavar="N",
        help="N busy-looping processes (same priority) run beside the server while it is "
        "measured: the machine's other work, reproducibly (default 0)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    verdict.add_argument(parser)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="cardloop-callback-bench-")
    env = configure(tmp)
    ensure_database(env.get("DATABASE_URL"))
    server_env = {**env, "DATABASE_POOL_MAX_SIZE": str(args.pool_max_size)}

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)

    from botadmin import services
    from botadmin.models import Bot
    from feedback import deliveries
    from feedback.models import Revision
    from interactions.lark.signing import seal

    bot = Bot.objects.filter(app_id=APP_ID).first() or services.save_bot(
        "bench", Bot(app_id=APP_ID, name="callback bench")
    )
    services.set_bot_secret("bench", bot, "encrypt_key", ENCRYPT_KEY)
    services.set_bot_secret("bench", bot, "verification_token", VERIFICATION_TOKEN)
    services.set_policy_layer("bench", bot, {"enabled": True, "allow_reselect": True})

    total = args.requests * len(args.levels) + WARM_UP_CLICKS
    print(f"database: {connection.vendor}; creating {total} deliveries (dry run) ...")
    run_id = uuid.uuid4().hex[:8]
    card = {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": "bench answer"}]},
    }
    targets = []
    for i in range(total):
        operator = f"ou_bench_{i}"
        result = deliveries.deliver(
            bot,
            deliveries.DeliveryRequest(
                chat_id="oc_bench",
                card=card,
                response_kind="final",
                session_id=f"bench-{run_id}",
                turn_id=f"t-{i}",
                requester_open_id=operator,
            ),
        )
        targets.append((result.delivery, operator))
    revisions_before = Revision.objects.filter(delivery__session_id=f"bench-{run_id}").count()
    if connection.vendor == "postgresql":
        # what autovacuum does between runs in production: without it, the dead tuples that
        # creating the deliveries left (and earlier runs' rows) are part of what is measured
        print("VACUUM ANALYZE ...")
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    connection.close()

    def click_request(delivery, operator):
        payload = feedback_click_payload(
            delivery_id=delivery.delivery_id,
            open_message_id=delivery.platform_message_id,
            open_id=operator,
            app_id=APP_ID,
            verification_token=VERIFICATION_TOKEN,
            open_chat_id="oc_bench",
        )
        raw, headers = seal(payload, encrypt_key=ENCRYPT_KEY)

        def check(response):
            if response.status_code != 200:
                return f"HTTP {response.status_code}: {response.text[:200]}"
            toast = response.json().get("toast", {})
            if toast.get("type") != "success":
                return f"toast {toast}"
            return None

        return ("POST", f"/lark/{APP_ID}/callback", raw, headers, check)

    def health_request():
        def check(response):
            if response.status_code != 200 or response.json() != {"status": "ok"}:
                return f"HTTP {response.status_code}: {response.text[:200]}"
            return None

        return ("GET", "/healthz", None, {}, check)

    # like `manage.py serve --web-processes N`: a listening socket per Daphne process, all on
    # one port with SO_REUSEPORT, so the kernel spreads new connections over the processes
    servers = WebProcesses.start(server_env, args.processes, Path(tmp) / "daphne.log")
    base = servers.url
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(args.outside_load)
    ]
    try:
        # every process: lark-oapi imported, handler threads and pooled connections opened
        warm = [click_request(*targets.pop()) for _ in range(WARM_UP_CLICKS)]
        asyncio.run(run_level(base, warm, max(args.levels), 60, args.client))
        asyncio.run(
            run_level(
                base, [health_request() for _ in range(100)], max(args.levels), 60, args.client
            )
        )

        results = []
        for level in args.levels:
            clicks = [click_request(*targets.pop()) for _ in range(args.requests)]
            cpu_before = servers.cpu_seconds()
            click_result = asyncio.run(
                run_level(base, clicks, level, args.max_seconds, args.client)
            )
            click_result["server_cpu_ms"] = _cpu_per_request(
                cpu_before, servers.cpu_seconds(), click_result["requests"]
            )
            health = [health_request() for _ in range(args.requests)]
            cpu_before = servers.cpu_seconds()
            health_result = asyncio.run(
                run_level(base, health, level, args.max_seconds, args.client)
            )
            health_result["server_cpu_ms"] = _cpu_per_request(
                cpu_before, servers.cpu_seconds(), health_result["requests"]
            )
            ratio = (
                click_result["req_per_s"] / health_result["req_per_s"]
                if health_result["req_per_s"]
                else 0
            )
            results.append(
                {
                    "clicks": click_result,
                    "healthz": health_result,
                    "throughput_ratio": round(ratio, 2),
                }
            )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        servers.stop()
        log_text = servers.log_path.read_text(errors="replace")
        warnings = [
            line for line in log_text.splitlines() if " WARNING " in line or "Error" in line
        ]
        print(f"server log: {servers.log_path} ({len(warnings)} warning/error lines)")
        for line in warnings[:5]:
            print("   ", line[:200])

    from django.db import connection as conn

    conn.connect()
    written = (
        Revision.objects.filter(delivery__session_id=f"bench-{run_id}").count() - revisions_before
    )
    sent_clicks = sum(r["clicks"]["requests"] for r in results) + WARM_UP_CLICKS
    print()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )
    print(
        f"database: {conn.vendor} (server pool max size {args.pool_max_size}); "
        f"outside load: {args.outside_load} busy process(es); "
        f"revisions written {written} for {sent_clicks} clicks; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print()
    print(
        "conc | clicks p50 / p99 ms  req/s | healthz p50 / p99 ms  req/s | ratio | failures"
        " | server CPU ms per click / healthz"
    )
    for r in results:
        c, h = r["clicks"], r["healthz"]
        print(
            f"{c['concurrency']:>4} | {c['p50_ms']:>7} / {c['p99_ms']:>7} {c['req_per_s']:>6} |"
            f" {h['p50_ms']:>7} / {h['p99_ms']:>7} {h['req_per_s']:>6} |"
            f" {r['throughput_ratio']:>5} | {c['failures']}+{h['failures']}"
            f" | {c['server_cpu_ms']} / {h['server_cpu_ms']}"
        )
        for failure in (c["first_failure"], h["first_failure"]):
            if failure:
                print(f"     first failure: {failure}")
    if written != sent_clicks:
        print(f"WARNING: {sent_clicks} clicks answered but {written} revisions written")
    if args.json:
        print(json.dumps({"database": conn.vendor, "results": results}, indent=2))
    verdicts = verdict.Verdicts(f"callback load, {conn.vendor}")
    for r in results:
        c = r["clicks"]
        if c["concurrency"] == 32:
            verdicts.check(
                "c=32 click throughput ÷ /healthz",
                r["throughput_ratio"],
                ">= 0.75",
                r["throughput_ratio"] >= 0.75,
            )
            verdicts.check("c=32 click p99 (ms)", c["p99_ms"], "< 300", c["p99_ms"] < 300)
        verdicts.check(
            f"c={c['concurrency']} failed answers", c["failures"], "0", c["failures"] == 0
        )
    verdicts.check(
        "revisions written = clicks", f"{written}/{sent_clicks}", "equal", written == sent_clicks
    )
    verdicts.report()
    sys.exit(verdicts.exit_status(no_targets=args.no_targets))


if __name__ == "__main__":
    main()
