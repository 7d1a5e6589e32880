"""Outbox throughput: N events through 1 and 4 `outbox_worker` processes on PostgreSQL to a
local HTTPS receiver, against a bare loop of HTTP POSTs through the same HTTP client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cl_outbox \\
        .venv/bin/python bench/outbox_throughput.py [--events 10000] [--workers 1 4]

What is measured:
- bare loop: sequential POSTs of a typical event body (with Standard Webhooks headers) through
  one keep-alive `httpx.Client` using the same TLS settings as the worker — the rate one
  client can push at this receiver;
- outbox: the events and their outbox rows are committed in one transaction while the workers
  are already polling; the clock runs from that commit until every row is `done` (claim, sign,
  SSRF check, POST, settle and attempt log included). Each run checks the receiver got every
  webhook-id exactly once.
The receiver is `feedback/tests/receiver.py` (asyncio, TLS, keep-alive) in a process of its
own, so it shares a GIL with neither the bare loop nor the workers; `GET /_stats` on it answers
the number of requests and of distinct webhook-ids seen.
The database's outbox/event tables are emptied before each run: use a bench/dev database.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import verdict
from benchdb import ensure_database

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def configure(secret_dir: str, ca_file: str) -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": "cardloop.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "CARDLOOP_SECRET_DIR": secret_dir,
        "CARDLOOP_WEBHOOK_ALLOW_PRIVATE": "true",
        "CARDLOOP_WEBHOOK_CA_FILE": ca_file,
        "CARDLOOP_LOG_LEVEL": "WARNING",
        "DJANGO_SILENCED_SYSTEM_CHECKS": "cardloop.W001,staticfiles.W004,security.W004,security.W008",
    }
    os.environ.update(env)
    return {**os.environ, **env}


def serve_receiver(port_file: str, cert_file: str, key_file: str) -> None:
    """Child process: run the HTTPS receiver until stdin closes; `/_stats` → counts."""
    import collections
    import ssl

    from feedback.tests.receiver import HttpsReceiver, Reply

    class Leaf:
        def configure_cert(self, ctx: ssl.SSLContext) -> None:
            ctx.load_cert_chain(cert_file, key_file)

    receiver = HttpsReceiver(Leaf(), record=False)
    ids: collections.Counter = collections.Counter()

    def handler(request):
        if request.path == "/_stats":
            body = json.dumps(
                {
                    "requests": sum(ids.values()),
                    "unique_ids": len(ids),
                    "duplicates": sum(c - 1 for c in ids.values()),
                }
            ).encode()
            return Reply(200, body=body)
        if request.path == "/_reset":
            ids.clear()
            return Reply(204, body=b"")
        ids[request.headers.get("webhook-id")] += 1
        return None

    receiver.handler = handler
    receiver.start()
    Path(port_file).write_text(str(receiver.port))
    sys.stdin.read()
    receiver.stop()


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve-receiver":
        serve_receiver(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--concurrency", type=int, default=32, help="per worker")
    parser.add_argument("--bare", type=int, default=3000, help="requests in the bare loop")
    verdict.add_argument(parser)
    args = parser.parse_args()

    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    tmp = tempfile.mkdtemp(prefix="cardloop-bench-")
    ca_file = os.path.join(tmp, "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    cert_file, key_file = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    env = configure(os.path.join(tmp, "secrets"), ca_file)
    ensure_database(env.get("DATABASE_URL"))
    port_file = os.path.join(tmp, "port")
    receiver_proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-receiver", port_file, cert_file, key_file],
        stdin=subprocess.PIPE,
        env=env,
    )
    for _ in range(200):
        if os.path.exists(port_file) and Path(port_file).read_text():
            break
        time.sleep(0.05)
    port = int(Path(port_file).read_text())

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        sys.exit("this benchmark needs PostgreSQL: set DATABASE_URL=postgres://…")
    call_command("migrate", verbosity=0)

    import httpx
    from django.utils import timezone

    from feedback import destinations, webhooks
    from feedback.envelopes import envelope, serialize, stable_event_id
    from feedback.models import Event, OutboxItem, WebhookAttempt, WebhookDestination

    url = f"https://127.0.0.1:{port}/hook"
    stats_client = httpx.Client(verify=webhooks._ssl_context(), trust_env=False)

    def stats() -> dict:
        return stats_client.get(f"https://127.0.0.1:{port}/_stats").json()

    WebhookDestination.objects.filter(name="bench").delete()
    destination = WebhookDestination(name="bench", url=url, event_types=["turn.completed"])
    destinations.save_destination(
        destination, actor=None, secret=destinations.SecretChange("generate")
    )
    secret = destinations.signing_secrets(destination, timezone.now())[0]

    def sample_body(i: int) -> tuple[str, str]:
        data = {
            "delivery_id": f"del_bench_{i:06d}",
            "bot_app_id": "cli_bench",
            "session_id": f"sess-{i}",
            "turn_id": "turn-1",
            "attempt": 0,
            "status": "completed",
            "sent_at": "2025-03-01T12:00:00.000Z",
            "completed_at": "2025-03-01T12:00:03.000Z",
            "content_hash": "sha256:" + "ab" * 32,
            "platform_message_id": f"om_{i:06d}",
            "duration_ms": 3000,
            "usage": {"input_tokens": 1200, "output_tokens": 300},
            "model": "bench-model",
        }
        event_id = stable_event_id("bench", i, time.time_ns())
        return event_id, serialize(envelope(event_id, "turn.completed", timezone.now(), data))

    # -- bare loop ----------------------------------------------------------------------------
    _id, body = sample_body(0)
    raw = body.encode()
    with httpx.Client(verify=webhooks._ssl_context(), trust_env=False) as client:
        for _ in range(50):  # warm up
            client.post(url, content=raw)
        start = time.perf_counter()
        for n in range(args.bare):
            ts = int(time.time())
            client.post(
                url,
                content=raw,
                headers={
                    "content-type": "application/json",
                    "webhook-id": f"bare_{n}",
                    "webhook-timestamp": str(ts),
                    "webhook-signature": webhooks.signature_header([secret], f"bare_{n}", ts, raw),
                    "webhook-event-type": "turn.completed",
                },
            )
        bare_rate = args.bare / (time.perf_counter() - start)
    print(f"bare loop: {args.bare} POSTs, {bare_rate:.0f}/s")

    results = {"events": args.events, "bare_loop_per_s": round(bare_rate), "runs": []}
    for workers in args.workers:
        WebhookAttempt.objects.all().delete()
        OutboxItem.objects.all().delete()
        Event.objects.all().delete()
        if connection.vendor == "postgresql":
            # what autovacuum does between runs in production (it may be off on a bench
            # server): without it the dead rows of earlier runs are part of what is measured
            # (about a million of them made every rate 4× slower)
            with connection.cursor() as cursor:
                for model in (WebhookAttempt, OutboxItem, Event):
                    cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
        stats_client.get(f"https://127.0.0.1:{port}/_reset")
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "manage.py"),
                    "outbox_worker",
                    "--idle-sleep",
                    "0.05",
                    "--concurrency",
                    str(args.concurrency),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for _ in range(workers)
        ]
        for proc in procs:  # wait until each worker polls
            line = proc.stdout.readline().decode()
            if "started" not in line:
                sys.exit(f"worker did not start: {line}")
        bodies = [sample_body(i) for i in range(args.events)]
        with transaction.atomic():
            events = Event.objects.bulk_create(
                [Event(event_id=eid, type="turn.completed", body=b) for eid, b in bodies]
            )
            OutboxItem.objects.bulk_create(
                [OutboxItem(event=e, destination=destination, body=e.body) for e in events]
            )
        start = time.perf_counter()
        with connection.cursor() as cursor:  # a live table has statistics; give these some
            cursor.execute("ANALYZE feedback_outboxitem")
        deadline = start + 900
        done = 0
        while time.perf_counter() < deadline:
            done = OutboxItem.objects.filter(status="done").count()
            if done >= args.events:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - start
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        seen = stats()
        duplicates = seen["duplicates"]
        rate = done / elapsed
        run = {
            "workers": workers,
            "concurrency_per_worker": args.concurrency,
            "delivered": done,
            "seconds": round(elapsed, 2),
            "events_per_s": round(rate),
            "ratio_to_bare_loop": round(rate / bare_rate, 2),
            "duplicate_deliveries": duplicates,
            "unique_ids_received": seen["unique_ids"],
        }
        results["runs"].append(run)
        print(
            f"{workers} worker(s): {done} events in {elapsed:.1f} s = {rate:.0f}/s "
            f"({rate / bare_rate:.2f}× bare loop), duplicates {duplicates}"
        )
    stats_client.close()
    receiver_proc.communicate(timeout=30)
    WebhookAttempt.objects.all().delete()
    OutboxItem.objects.all().delete()
    Event.objects.all().delete()
    WebhookDestination.objects.filter(name="bench").delete()
    print(json.dumps(results, indent=2))
    verdicts = verdict.Verdicts("outbox throughput, PostgreSQL")
    for run in results["runs"]:
        n = run["workers"]
        if n == 4:
            verdicts.check(
                "4 workers ÷ bare loop",
                run["ratio_to_bare_loop"],
                ">= 0.75",
                run["ratio_to_bare_loop"] >= 0.75,
            )
        verdicts.check(
            f"{n} worker(s) duplicate deliveries",
            run["duplicate_deliveries"],
            "0",
            run["duplicate_deliveries"] == 0,
        )
        verdicts.check(
            f"{n} worker(s) delivered",
            f"{run['delivered']}/{args.events}",
            "all",
            run["delivered"] >= args.events,
        )
    verdicts.report()
    sys.exit(verdicts.exit_status(no_targets=args.no_targets))


if __name__ == "__main__":
    main()
