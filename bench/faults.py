"""Fault bench: what a live Cardloop (`manage.py serve`) does with acknowledged clicks and their
webhooks while its database, its Redis or one of its processes goes away.

    .venv/bin/python bench/faults.py                                   # SQLite (fresh file in var/)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cardloop_faults \\
        .venv/bin/python bench/faults.py [--redis] [--scenarios pg_cut redis_restart ...]
    .venv/bin/python bench/faults.py --quick --scenarios worker_kill   # a few seconds a scenario

What runs (all on 127.0.0.1, all started and stopped by this script):
- `manage.py serve --port P` (Daphne + card, outbox and alert workers) as a child, DEBUG off;
  on PostgreSQL its `DATABASE_URL` points at a loopback TCP proxy (`tests/tcpproxy.py`) in
  front of the real server, so the database can be cut without stopping anyone's PostgreSQL.
  When `serve` exits (today it stops everything once a child dies), the script starts it
  again, as a supervisor would, and says so;
- with `--redis` (the default on PostgreSQL): a `redis-server` of its own on a spare port
  (6396–6399, no persistence) as the channel layer (`REDIS_URL`, db 6); the Redis restart
  scenario only ever restarts that one;
- the Feishu stand-in (`tests/lark_stub.py`): deliveries are sent through it and the card
  worker applies the card updates of the clicks to it (not a dry run);
- an HTTPS webhook receiver (`feedback/tests/receiver.py`, TLS with a `trustme` certificate
  that Cardloop trusts through `CARDLOOP_WEBHOOK_CA_FILE`) subscribed to `feedback.revised`;
  it counts each `webhook-id` (= event id) it is sent.

Each scenario: fresh final-answer deliveries (one per click, each clicked once by its
requester, "conclusive / usable"); open-loop clicks at `--rate` per second (each on its own
connection, signed and encrypted like Feishu's `card.action.trigger`, a 10 s client timeout)
for a few seconds before the fault, during it and after it; `/readyz` polled every 0.5 s
and the bot API (`GET /api/v1/events`) every second. Then a settle period (until revisions,
webhooks and card updates stop moving, at most `--settle` s), then the clicks that were not
recorded are sent again with the same signed bytes (what Feishu's or the user's retry does)
and counted once more after another settle. The faults:

- `pg_cut`: the proxy refuses and closes every PostgreSQL connection for 30 s (PostgreSQL);
- `redis_restart`: the script's Redis is stopped (SIGTERM) and started again after 5 s;
- `web_kill`: SIGKILL of `serve`'s Daphne child mid-load;
- `worker_kill`: SIGKILL of `serve`'s `card_worker` child mid-load;
- `sqlite_lock`: another process holds SQLite's write lock (`BEGIN IMMEDIATE`) for 25 s (SQLite).

Per scenario: clicks sent; acknowledged (HTTP 200 with a success or info toast: "Recorded",
"Received. Still working on it", "Already received": Feishu does not retry those and people
do not click again); recorded (the delivery has a revision); lost (acknowledged, not recorded
after the settle period); duplicated (a delivery with more than one revision); recorded by
the retry (of the lost ones); webhooks of the scenario's `feedback.revised` events delivered
once / twice or more / missing; HTTP 500 answers (clicks, `/readyz`, API); seconds from the
end of the fault until every later click got the normal answer ("Recorded"); `/readyz`
answer times while the fault lasted (max, p50; at least the 5 s after a kill). A markdown
row per scenario, `--json` for everything.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from benchdb import ensure_database
from clicks import feedback_click_payload

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP_ID = "cli_bench_faults"
APP_SECRET = "bench-app-secret"
ENCRYPT_KEY = "bench-faults-encrypt-key"
VERIFICATION_TOKEN = "vt_bench_faults"
CLICK_TIMEOUT = 10.0
SCENARIOS = ["pg_cut", "redis_restart", "web_kill", "worker_kill", "sqlite_lock"]
COLUMNS = [
    "scenario",
    "database",
    "clicks sent",
    "acknowledged",
    "recorded",
    "lost",
    "duplicated",
    "recorded by retry",
    "webhooks once / twice / missing",
    "HTTP 500",
    "normal answers after (s)",
    "/readyz in fault max / p50 (ms)",
    "/readyz in fault answers",
    "card updates left",
]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def free_port(preferred: list[int] | None = None) -> int:
    for port in preferred or []:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- timings -----------------------------------------------------------------------------------


@dataclass
class Timing:
    """Seconds of each phase: clicks before the fault, the fault, clicks after it."""

    before: float
    fault: float
    after: float
    settle: float


def timing(name: str, quick: bool, settle: float) -> Timing:
    """The phases of scenario `name` (seconds); `quick` for the smoke run."""
    if quick:
        fault = {"pg_cut": 4, "redis_restart": 2, "sqlite_lock": 4}.get(name, 0)
        return Timing(before=2, fault=fault, after=6, settle=min(settle, 20))
    fault = {"pg_cut": 30, "redis_restart": 5, "sqlite_lock": 25}.get(name, 0)
    after = 30 if name in ("web_kill", "worker_kill") else 15
    return Timing(before=5, fault=fault, after=after, settle=settle)


# -- the pieces the script runs ------------------------------------------------------------------


class OwnRedis:
    """A `redis-server` of this script on a spare port (no persistence), restartable."""

    def __init__(self, tmp: str):
        self.port = free_port([6396, 6397, 6398, 6399])
        self.log_path = os.path.join(tmp, "redis.log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.5) as s,
            ):
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/6"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Serve:
    """`manage.py serve` as a child; restarted by `supervise()` when it exits."""

    def __init__(self, env: dict[str, str], port: int, tmp: str):
        self.env, self.port = env, port
        self.log_path = os.path.join(tmp, "serve.log")
        self.proc: subprocess.Popen | None = None
        self.restarts: list[tuple[float, int | None]] = []  # (time, exit status)
        self._stopping = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if not self._thread.is_alive():
            self._thread.start()

    def wait_serving(self, timeout: float = 180, *, fail: bool = True) -> bool:
        """Wait until `/healthz` answers 200 (True); after `timeout` s exit the script, or
        return False when `fail` is false."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _ = http_get(self.port, "/healthz", timeout=2)
            if status == 200:
                return True
            time.sleep(0.3)
        if fail:
            raise SystemExit(
                f"serve did not answer /healthz within {timeout:.0f} s; see {self.log_path}"
            )
        return False

    def child(self, needle: str) -> int | None:
        if self.proc is None:
            return None
        for pid in _children(self.proc.pid):
            if needle in _cmdline(pid):
                return pid
        return None

    def _supervise(self) -> None:
        while not self._stopping:
            time.sleep(0.3)
            with self._lock:
                if self._stopping or self.proc is None or self.proc.poll() is None:
                    continue
                status = self.proc.returncode
                log(f"serve exited with status {status}; starting it again (as a supervisor would)")
                self.restarts.append((time.monotonic(), status))
                self.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def http_get(port: int, path: str, *, timeout: float, headers: dict | None = None):
    """(status or None, seconds) of a GET on 127.0.0.1:`port`."""
    import http.client

    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    except (OSError, http.client.HTTPException):
        return None, time.monotonic() - started
    finally:
        conn.close()


class Prober:
    """Open-loop probes: `/readyz` every 0.5 s and the bot API every 1 s, each probe in a
    thread of its own (a hanging probe does not delay the next); keeps (start time, seconds,
    status or None) of each."""

    def __init__(self, port: int, api_key: str):
        self.port, self.api_key = port, api_key
        self.readyz: list[tuple[float, float, int | None]] = []
        self.api: list[tuple[float, float, int | None]] = []
        self._stop = threading.Event()
        self._probes: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._schedule, daemon=True)

    def _probe(self, path, out, headers):
        started = time.monotonic()
        status, took = http_get(self.port, path, timeout=15, headers=headers)
        out.append((started, took, status))

    def _schedule(self):
        api = ("/api/v1/events?limit=1", self.api, {"Authorization": f"Bearer {self.api_key}"})
        tick = 0
        while not self._stop.wait(0.5):
            jobs = [("/readyz", self.readyz, {})] + ([api] if tick % 2 == 0 else [])
            for job in jobs:
                thread = threading.Thread(target=self._probe, args=job, daemon=True)
                thread.start()
                self._probes.append(thread)
            tick += 1

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        for thread in self._probes:
            thread.join(timeout=20)


def start_receiver(tmp: str):
    """The HTTPS receiver in this process; returns (receiver, CA file, Counter of webhook-ids)."""
    import trustme

    from feedback.tests.receiver import HttpsReceiver

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca_file = os.path.join(tmp, "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    ids: collections.Counter = collections.Counter()
    lock = threading.Lock()

    receiver = HttpsReceiver(leaf, record=False)

    def handler(request):
        with lock:
            ids[request.headers.get("webhook-id")] += 1
        return None  # the default 200

    receiver.handler = handler
    receiver.start()
    return receiver, ca_file, ids


# -- clicks ------------------------------------------------------------------------------------


@dataclass
class Click:
    delivery_pk: int
    raw: bytes  # the whole HTTP request, sealed once: a retry sends the same bytes
    sent: float = 0.0
    took: float | None = None
    status: int | None = None
    toast: str = ""  # success / info / warning / error / "" (no toast)
    error: str = ""
    retry_answer: str = ""  # "<status> <toast>" or the error of the resend

    @property
    def acknowledged(self) -> bool:
        return self.status == 200 and self.toast in ("success", "info")

    @property
    def normal(self) -> bool:
        return self.status == 200 and self.toast == "success"


def click_request(port: int, delivery, operator: str) -> bytes:
    """The whole HTTP request of `operator`'s "conclusive / usable" click on `delivery`:
    encrypted and signed like Feishu's `card.action.trigger`, with a fresh event id."""
    from interactions.lark.signing import seal

    payload = feedback_click_payload(
        delivery_id=delivery.delivery_id,
        open_message_id=delivery.platform_message_id,
        open_id=operator,
        app_id=APP_ID,
        verification_token=VERIFICATION_TOKEN,
        open_chat_id="oc_faults",
    )
    body, headers = seal(payload, encrypt_key=ENCRYPT_KEY)
    lines = [
        f"POST /lark/{APP_ID}/callback HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Connection: close",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def send_raw(port: int, raw: bytes) -> tuple[int | None, str, str]:
    """(status, toast type, error) of one request on a fresh connection."""
    try:
        async with asyncio.timeout(CLICK_TIMEOUT):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(raw)
                data = await reader.read()
            finally:
                writer.close()
    except TimeoutError:
        return None, "", "timeout"
    except OSError as exc:
        return None, "", type(exc).__name__
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None, "", "no HTTP answer"
    toast = ""
    with contextlib.suppress(ValueError, AttributeError):
        if b"transfer-encoding: chunked" in head.lower():
            body = _unchunk(body)
        toast = (json.loads(body).get("toast") or {}).get("type", "")
    return status, toast, ""


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


async def open_loop(port: int, clicks: list[Click], rate: float, seconds: float, t0: float):
    """Send clicks at `rate`/s from monotonic time `t0` for `seconds`; returns the sent ones."""
    tasks = []
    sent = []

    async def one(click: Click):
        click.sent = time.monotonic()
        click.status, click.toast, click.error = await send_raw(port, click.raw)
        click.took = time.monotonic() - click.sent

    for i, click in enumerate(clicks):
        at = t0 + i / rate
        if at - t0 >= seconds:
            break
        delay = at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        sent.append(click)
        tasks.append(asyncio.create_task(one(click)))
    await asyncio.gather(*tasks)
    return sent


# -- faults ------------------------------------------------------------------------------------


class Faults:
    """start(name) → None; end(name) → None (blocking until the fault is over)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.locker: subprocess.Popen | None = None

    def start(self, name: str, seconds: float) -> None:
        ctx = self.ctx
        if name == "pg_cut":
            ctx.proxy.cut("refuse")
        elif name == "redis_restart":
            ctx.redis.stop()
        elif name in ("web_kill", "worker_kill"):
            needle = "cardloop.webserver" if name == "web_kill" else "card_worker"
            pid = ctx.serve.child(needle)
            if pid is None:
                log(f"  no {needle} child of serve found; nothing killed")
                return
            os.kill(pid, signal.SIGKILL)
            log(f"  SIGKILL {needle} (pid {pid})")
        elif name == "sqlite_lock":
            code = (
                "import sqlite3, sys, time\n"
                "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
                "c.execute('BEGIN IMMEDIATE')\n"
                "print('locked', flush=True)\n"
                "time.sleep(float(sys.argv[2]))\n"
                "c.execute('COMMIT')\n"
            )
            self.locker = subprocess.Popen(
                [sys.executable, "-c", code, ctx.sqlite_path, str(seconds)],
                stdout=subprocess.PIPE,
                text=True,
            )
            if self.locker.stdout.readline().strip() != "locked":
                raise SystemExit("the locking process could not take the write lock")

    def end(self, name: str) -> None:
        ctx = self.ctx
        if name == "pg_cut":
            ctx.proxy.heal()
        elif name == "redis_restart":
            ctx.redis.start()
        elif name == "sqlite_lock" and self.locker is not None:
            self.locker.wait()


def available(name: str, vendor: str, redis: OwnRedis | None) -> str | None:
    """Why scenario `name` cannot run here, or None."""
    if name == "pg_cut" and vendor != "postgresql":
        return "needs PostgreSQL"
    if name == "sqlite_lock" and vendor != "sqlite":
        return "needs SQLite"
    if name == "redis_restart" and redis is None:
        return "needs --redis (a redis-server this script starts)"
    return None


# -- one scenario ------------------------------------------------------------------------------


def run_scenario(ctx, name: str, t: Timing) -> dict:
    """Seed, load, inject fault `name`, settle, resend the unrecorded clicks, count.

    Returns the scenario's figures (the keys `row()` reads, and more for `--json`). Exits the
    script when `serve` does not answer `/healthz` within 180 s before the load starts."""
    from django.db import close_old_connections

    from feedback.models import Event, Revision
    from interactions.models import CardUpdate

    close_old_connections()
    ctx.serve.wait_serving()
    total = int((t.before + t.fault + t.after) * ctx.rate) + 2
    session = f"faults-{ctx.run_id}-{name}"
    log(f"{name}: seeding {total} deliveries through the Feishu stand-in ...")
    clicks = ctx.seed(session, total)
    ctx.warm_up()
    card_updates_before = set(CardUpdate.objects.values_list("pk", flat=True))
    prober = Prober(ctx.port, ctx.api_key).start()
    faults = Faults(ctx)
    marks: dict[str, float] = {}

    async def drive():
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        load = asyncio.create_task(
            open_loop(ctx.port, clicks, ctx.rate, t.before + t.fault + t.after, t0)
        )
        await asyncio.sleep(t.before)
        log(f"{name}: fault starts")
        marks["fault_start"] = time.monotonic()
        await loop.run_in_executor(None, faults.start, name, t.fault)
        if name != "sqlite_lock":
            await asyncio.sleep(max(0.0, marks["fault_start"] + t.fault - time.monotonic()))
        await loop.run_in_executor(None, faults.end, name)
        marks["fault_end"] = time.monotonic()
        log(f"{name}: fault over after {marks['fault_end'] - marks['fault_start']:.1f} s")
        return await load

    sent = asyncio.run(drive())
    log(f"{name}: {len(sent)} clicks sent; settling (at most {t.settle:.0f} s) ...")
    pks = [c.delivery_pk for c in sent]

    def counts():
        revs = collections.Counter(
            Revision.objects.filter(delivery_id__in=pks).values_list("delivery_id", flat=True)
        )
        events = list(
            Event.objects.filter(type="feedback.revised", delivery_id__in=pks).values_list(
                "event_id", flat=True
            )
        )
        with ctx.ids_lock:
            hooks = {e: ctx.hook_ids.get(e, 0) for e in events}
        left = CardUpdate.objects.exclude(status="done").exclude(pk__in=card_updates_before).count()
        return revs, hooks, left

    def settle(seconds: float):
        deadline = time.monotonic() + seconds
        last, stable_since = None, time.monotonic()
        time.sleep(min(3.0, seconds))
        while True:
            close_old_connections()
            revs, hooks, left = counts()
            state = (sum(revs.values()), sum(hooks.values()), left)
            done = left == 0 and all(v >= 1 for v in hooks.values())
            if state != last:
                last, stable_since = state, time.monotonic()
            if (
                time.monotonic() >= deadline
                or (done and time.monotonic() - stable_since >= 2)
                or (time.monotonic() - stable_since >= 10)
            ):
                return revs, hooks, left
            time.sleep(1)

    revs, hooks, left = settle(t.settle)
    prober.stop()
    not_recorded = [c for c in sent if revs.get(c.delivery_pk, 0) == 0]
    lost = [c for c in not_recorded if c.acknowledged]
    recorded_first = sum(1 for c in sent if revs.get(c.delivery_pk, 0) > 0)
    retried = lost_retried = 0
    if not_recorded and ctx.resend:
        if not ctx.serve.wait_serving(t.settle, fail=False):
            log(f"{name}: serve is not answering; resending anyway")
        log(f"{name}: sending the {len(not_recorded)} unrecorded clicks again (same bytes) ...")

        async def resend():
            results = await asyncio.gather(*(send_raw(ctx.port, c.raw) for c in not_recorded))
            for c, (status, toast, error) in zip(not_recorded, results, strict=True):
                c.retry_answer = f"{status} {toast}".strip() if status else (error or "none")

        asyncio.run(resend())
        revs2, hooks, left = settle(min(t.settle, 30))
        retried = sum(1 for c in not_recorded if revs2.get(c.delivery_pk, 0) > 0)
        lost_retried = sum(1 for c in lost if revs2.get(c.delivery_pk, 0) > 0)
        revs = revs2

    fault_start, fault_end = marks["fault_start"], marks["fault_end"]
    after = sorted((c for c in sent if c.sent >= fault_end), key=lambda c: c.sent)
    recovery: float | None = 0.0
    for i in range(len(after) - 1, -1, -1):
        if not after[i].normal:
            recovery = after[i + 1].sent - fault_end if i + 1 < len(after) else None
            break
    window_end = max(fault_end, fault_start + 5)
    # probes that were waiting at any moment of the fault (started before its end, answered
    # after its start)
    in_fault = [p for p in prober.readyz if p[0] <= window_end and p[0] + p[1] >= fault_start]
    took = [p[1] for p in in_fault]
    http500 = sum(1 for c in sent if c.status == 500) + sum(
        1 for p in prober.readyz + prober.api if p[2] == 500
    )
    answers = collections.Counter(
        f"{c.status} {c.toast}".strip() if c.status else (c.error or "none") for c in sent
    )
    result = {
        "scenario": name,
        "database": ctx.vendor + ("+redis" if ctx.redis else ""),
        "fault_seconds": round(fault_end - fault_start, 1),
        "clicks_sent": len(sent),
        "acknowledged": sum(1 for c in sent if c.acknowledged),
        "recorded": recorded_first,
        "recorded_after_retry": sum(1 for c in sent if revs.get(c.delivery_pk, 0) > 0),
        "lost": len(lost),
        "duplicated": sum(1 for c in sent if revs.get(c.delivery_pk, 0) > 1),
        "resent": len(not_recorded) if ctx.resend else 0,
        "recorded_by_retry": retried,
        "lost_recorded_by_retry": lost_retried,
        "not_acknowledged_not_recorded": len(not_recorded) - len(lost),
        "webhooks_once": sum(1 for v in hooks.values() if v == 1),
        "webhooks_twice": sum(1 for v in hooks.values() if v >= 2),
        "webhooks_missing": sum(1 for v in hooks.values() if v == 0),
        "http_500": http500,
        "http_500_clicks": sum(1 for c in sent if c.status == 500),
        "http_500_api": sum(1 for p in prober.api if p[2] == 500),
        "normal_answers_after_s": None if recovery is None else round(max(0.0, recovery), 1),
        "readyz_in_fault_max_ms": round(max(took) * 1000) if took else None,
        "readyz_in_fault_p50_ms": round(percentile(took, 50) * 1000) if took else None,
        "readyz_in_fault_statuses": dict(
            collections.Counter(str(p[2] or "none") for p in in_fault)
        ),
        "api_statuses": dict(collections.Counter(str(p[2] or "none") for p in prober.api)),
        "click_answers": dict(answers),
        "retry_answers": dict(collections.Counter(c.retry_answer for c in not_recorded)),
        "answered_click_p50_ms": _ms(percentile([c.took for c in sent if c.status], 50)),
        "answered_click_max_ms": _ms(max((c.took for c in sent if c.status), default=None)),
        "card_updates_left": left,
        "serve_restarts": sum(1 for at, _ in ctx.serve.restarts if at >= fault_start),
    }
    log(f"{name}: {row(result)}")
    return result


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _fmt(value) -> str:
    return "never" if value is None else str(value)


def row(r: dict) -> str:
    """One markdown table row (the columns of `COLUMNS`) of a `run_scenario` result."""
    cells = [
        r["scenario"],
        r["database"],
        r["clicks_sent"],
        r["acknowledged"],
        r["recorded"],
        r["lost"],
        r["duplicated"],
        f"{r['recorded_by_retry']} of {r['resent']}",
        f"{r['webhooks_once']} / {r['webhooks_twice']} / {r['webhooks_missing']}",
        r["http_500"],
        _fmt(r["normal_answers_after_s"]),
        f"{_fmt(r['readyz_in_fault_max_ms'])} / {_fmt(r['readyz_in_fault_p50_ms'])}",
        " ".join(f"{k}×{v}" for k, v in sorted(r["readyz_in_fault_statuses"].items())) or "-",
        r["card_updates_left"],
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


# -- setup ---------------------------------------------------------------------------------------


class Context:
    """What the scenarios share: the server, the proxy, the Redis, the receiver's counts, the
    seeding and warm-up functions (attributes set in `main`)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=SCENARIOS,
        default=None,
        help="default: every scenario this database allows",
    )
    parser.add_argument("--rate", type=float, default=18.0, help="clicks per second (open loop)")
    parser.add_argument("--quick", action="store_true", help="a few seconds per scenario (smoke)")
    parser.add_argument("--settle", type=float, default=60.0, help="max seconds to wait after load")
    parser.add_argument("--no-resend", action="store_true", help="do not resend unrecorded clicks")
    parser.add_argument("--port", type=int, default=8151, help="serve's port (0: any free one)")
    parser.add_argument(
        "--sqlite",
        default=str(ROOT / "var" / "bench_faults.sqlite3"),
        help="SQLite file when DATABASE_URL is unset (recreated)",
    )
    redis_group = parser.add_mutually_exclusive_group()
    redis_group.add_argument(
        "--redis",
        action="store_true",
        default=None,
        help="run a redis-server of this script (default on PostgreSQL)",
    )
    redis_group.add_argument("--no-redis", dest="redis", action="store_false")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="cardloop-faults-")
    database_url = os.environ.get("DATABASE_URL", "")
    sqlite_path = None
    if not database_url:
        sqlite_path = os.path.abspath(args.sqlite)
        Path(sqlite_path).parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
        database_url = f"sqlite:///{sqlite_path}"
    is_pg = database_url.startswith(("postgres://", "postgresql://", "pgsql://"))
    ensure_database(database_url if is_pg else None)

    from tests.lark_stub import FeishuStub

    # ids past every earlier run's: a PostgreSQL bench database keeps its deliveries, and a
    # message id may belong to one delivery only
    stub = FeishuStub(first_id=time.time_ns() // 1000).start()
    env = {
        "DJANGO_SETTINGS_MODULE": "cardloop.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "CARDLOOP_SECRET_DIR": os.path.join(tmp, "secrets"),
        "CARDLOOP_LARK_DRY_RUN": "false",
        "CARDLOOP_LARK_DOMAIN": stub.url,
        "CARDLOOP_WEBHOOK_ALLOW_PRIVATE": "true",
        "CARDLOOP_LOG_LEVEL": "WARNING",
        "PROMETHEUS_MULTIPROC_DIR": os.path.join(tmp, "metrics"),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "DATABASE_URL": database_url,
        "DJANGO_SILENCED_SYSTEM_CHECKS": "cardloop.W001,staticfiles.W004,security.W004,security.W008",
    }
    os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)
    redis = None
    use_redis = is_pg if args.redis is None else args.redis
    if use_redis:
        redis = OwnRedis(tmp)
        redis.start()
        env["REDIS_URL"] = redis.url
        log(f"redis-server of this run on port {redis.port}")
    else:
        env["REDIS_URL"] = ""
    os.environ.update(env)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    receiver, ca_file, hook_ids = start_receiver(tmp)
    os.environ["CARDLOOP_WEBHOOK_CA_FILE"] = env["CARDLOOP_WEBHOOK_CA_FILE"] = ca_file
    call_command("migrate", verbosity=0)
    vendor = connection.vendor

    from botadmin import services
    from botadmin.models import Bot, BotApiKey
    from feedback import deliveries, destinations
    from feedback.models import WebhookDestination

    bot = Bot.objects.filter(app_id=APP_ID).first() or services.save_bot(
        "bench", Bot(app_id=APP_ID, name="fault bench")
    )
    services.set_bot_secret("bench", bot, "app_secret", APP_SECRET)
    services.set_bot_secret("bench", bot, "encrypt_key", ENCRYPT_KEY)
    services.set_bot_secret("bench", bot, "verification_token", VERIFICATION_TOKEN)
    services.set_policy_layer("bench", bot, {"enabled": True, "allow_reselect": True})
    raw_key, lookup = BotApiKey.new_raw()
    key = BotApiKey(bot=bot, label="fault bench")
    key.set_raw(raw_key, lookup)
    key.save()
    WebhookDestination.objects.filter(name="fault bench").delete()
    destinations.save_destination(
        WebhookDestination(
            name="fault bench",
            url=f"https://127.0.0.1:{receiver.port}/hook",
            event_types=["feedback.revised"],
        ),
        actor=None,
        secret=destinations.SecretChange("generate"),
    )

    proxy = None
    server_env = dict(env)
    if is_pg:
        import environ

        from tests.tcpproxy import TcpProxy

        cfg = environ.Env.db_url_config(database_url)
        proxy = TcpProxy(
            cfg.get("HOST") or "127.0.0.1",
            int(cfg.get("PORT") or 5432),
            port=free_port([8152, 8153, 8154]),
        ).start()
        auth = cfg["USER"] + (f":{cfg['PASSWORD']}" if cfg.get("PASSWORD") else "")
        server_env["DATABASE_URL"] = f"postgres://{auth}@127.0.0.1:{proxy.port}/{cfg['NAME']}"
        log(f"serve reaches PostgreSQL through the proxy on port {proxy.port}")

    ctx = Context()
    ctx.run_id = uuid.uuid4().hex[:8]
    ctx.rate = args.rate
    ctx.resend = not args.no_resend
    ctx.vendor = vendor
    ctx.redis = redis
    ctx.proxy = proxy
    ctx.sqlite_path = sqlite_path
    ctx.hook_ids = hook_ids
    ctx.ids_lock = threading.Lock()
    ctx.api_key = raw_key
    ctx.port = args.port or free_port()
    card = {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": "fault bench answer"}]},
    }
    counter = iter(range(10**9))

    def seed(session: str, count: int) -> list[Click]:
        out = []
        for _ in range(count):
            i = next(counter)
            operator = f"ou_faults_{ctx.run_id}_{i}"
            result = deliveries.deliver(
                bot,
                deliveries.DeliveryRequest(
                    chat_id="oc_faults",
                    card=card,
                    response_kind="final",
                    session_id=session,
                    turn_id=f"t-{i}",
                    requester_open_id=operator,
                ),
            )
            out.append(
                Click(result.delivery.pk, click_request(ctx.port, result.delivery, operator))
            )
        connection.close()
        return out

    def warm_up() -> None:
        warm = seed(f"faults-{ctx.run_id}-warm", 4)

        async def go():
            return await asyncio.gather(*(send_raw(ctx.port, c.raw) for c in warm))

        answers = asyncio.run(go())
        log(f"warm-up clicks: {[f'{s} {t}' for s, t, _ in answers]}")

    ctx.seed = seed
    ctx.warm_up = warm_up

    names = args.scenarios or [n for n in SCENARIOS if available(n, vendor, redis) is None]
    serve = Serve(server_env, ctx.port, tmp)
    ctx.serve = serve
    results, skipped = [], {}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    try:
        log(
            f"starting manage.py serve on port {ctx.port} ({vendor}{' + Redis' if redis else ''}) ..."
        )
        serve.start()
        serve.wait_serving()
        for name in names:
            why = available(name, vendor, redis)
            if why:
                log(f"{name}: skipped ({why})")
                skipped[name] = why
                continue
            results.append(run_scenario(ctx, name, timing(name, args.quick, args.settle)))
    finally:
        serve.stop()
        if proxy:
            proxy.stop()
        if redis:
            redis.stop()
        receiver.stop()
        stub.stop()

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    print()
    print(
        f"{started}, commit {commit}, {platform.machine()} {os.cpu_count()} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, rate {args.rate}/s"
        f"{', quick' if args.quick else ''}; serve log {serve.log_path}"
    )
    print()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in results:
        print(row(r))
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    if args.json:
        print(
            json.dumps(
                {
                    "started": started,
                    "commit": commit,
                    "rate": args.rate,
                    "quick": args.quick,
                    "results": results,
                    "skipped": skipped,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
