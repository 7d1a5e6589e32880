"""Panel fan-out: N question panels (WebSocket clients of `/ws/panel/`) connected to one Daphne
process; how long an ask takes from registration to every panel, and a card submit from the
Feishu callback to the cancellation on every panel.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cl_panel_bench \\
        .venv/bin/python bench/panel_fanout.py [--panels 1000] [--asks 20] [--max-seconds 600]

What is measured (all on 127.0.0.1, the clients in this process, Daphne in a child process):
- connect: N panels of one user connect with a desktop token (`Authorization: Bearer`), 50
  handshakes at a time; each must get its snapshot.
- ask → panels: for each of `--asks` asks, the clock starts just before `POST
  /api/v1/sessions/<id>/asks` (bot API key) and stops for each panel when its
  `ask_user_questions` frame for that request arrives; "all" is the last panel's time.
- card submit → panels: the ask's form is submitted as Feishu would (encrypted and signed
  `card.action.trigger`, `POST /lark/<app_id>/callback`); the clock starts before the POST and
  stops per panel at its `ask_user_questions_cancelled` (reason `answered`). The callback's
  own answer time is reported too.
Every wait is per panel (a panel counts once, whatever it is sent) and bounded; the run stops
after `--max-seconds`. Frames a panel is sent twice and resync snapshots are counted and
printed; the script exits 1 when any panel saw a duplicate frame. The bot has no app secret, so
Feishu calls are dry-run (logged, synthetic ids): no traffic leaves the machine. The bench
database is written to (a bot `cli_bench_panel`, its sessions and asks): use a bench database.
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
from pathlib import Path

import verdict
from benchdb import ensure_database

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP_ID = "cli_bench_panel"
USER = "ou_bench_user_{}"
SESSION = "bench_session_{}"


def configure(secret_dir: str) -> dict[str, str]:
    env = {
        "DJANGO_SETTINGS_MODULE": "cardloop.settings",
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "CARDLOOP_SECRET_DIR": secret_dir,
        "CARDLOOP_LARK_DRY_RUN": "true",
        "CARDLOOP_LOG_LEVEL": "WARNING",
        "NO_PROXY": "127.0.0.1,localhost",
        "DJANGO_SILENCED_SYSTEM_CHECKS": "cardloop.W001,staticfiles.W004,security.W004,security.W008",
    }
    os.environ.update(env)
    return {**os.environ, **env}


def prepare(users: int) -> dict:
    """Migrate, then create the bench bot (encrypt key + verification token, no app secret),
    a desktop token per user and a bot API key. Previous bench asks are cancelled."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from botadmin import services
    from botadmin.models import Bot, BotApiKey
    from interactions.models import Interaction, PanelPresence
    from plumbing.secretstore import write_secret

    bot = Bot.objects.filter(app_id=APP_ID).first() or Bot.objects.create(
        app_id=APP_ID, name="Panel bench"
    )
    bot.encrypt_key_ref = write_secret("bench-encrypt-key")
    bot.verification_token_ref = write_secret("bench-verification-token")
    bot.save()
    Interaction.objects.filter(bot=bot, status="pending").update(status="cancelled")
    PanelPresence.objects.filter(bot=bot).delete()
    tokens = [
        services.issue_desktop_token("bench", bot, USER.format(u), "bench")[0] for u in range(users)
    ]
    raw_key, lookup = BotApiKey.new_raw()
    key = BotApiKey(bot=bot, label="bench")
    key.set_raw(raw_key, lookup)
    key.save()
    return {"bot": bot, "tokens": tokens, "key": raw_key}


def start_daphne(env: dict, log_path: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "cardloop.asgi:application"],
        env=env,
        pass_fds=[sock.fileno()],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    sock.close()
    deadline = time.monotonic() + 120
    while True:
        if process.poll() is not None:
            raise SystemExit(log_path.read_text()[-3000:])
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("daphne did not start")
        time.sleep(0.3)


class Panel:
    """One client: records when each (type, requestId) frame first arrived; counts frames seen
    again (`duplicates`, which the server must never send) and the snapshots after the first
    one (`resyncs`: a periodic resync that found something to repair)."""

    def __init__(self, ws, user: int):
        self.ws = ws
        self.user = user
        self.seen: dict[tuple[str, str], float] = {}
        self.snapshot = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.duplicates = 0
        self.resyncs = 0

    async def read(self, waiters: dict):
        async for raw in self.ws:
            now = time.perf_counter()
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "snapshot":
                if self.snapshot.is_set():
                    self.resyncs += 1
                self.snapshot.set()
                continue
            key = (kind, frame.get("requestId"))
            if key in self.seen:  # waiters count panels, not frames
                self.duplicates += 1
                continue
            self.seen[key] = now
            counter = waiters.get(key)
            if counter is not None:
                counter[0] -= 1
                if counter[0] <= 0:
                    counter[1].set()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def summary(label: str, values_ms: list[float]) -> str:
    return (
        f"{label:<34} n={len(values_ms):>6}  p50={pct(values_ms, 50):8.1f} ms  "
        f"p99={pct(values_ms, 99):8.1f} ms  max={max(values_ms):8.1f} ms"
    )


async def run(url: str, world: dict, args) -> dict:
    import httpx
    from websockets.asyncio.client import connect

    # Project modules after Django is set up (`configure`); the questions are the ones the
    # ask tests use (one single-select, one multi-select).
    from interactions.lark.signing import seal
    from interactions.render import progress_cards
    from interactions.tests.ask_helpers import QUESTIONS
    from tests import feishu

    started = time.monotonic()

    def remaining() -> float:
        left = args.max_seconds - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError("--max-seconds reached")
        return left

    ws_url = url.replace("http://", "ws://") + "/ws/panel/"
    waiters: dict = {}
    panels: list[Panel] = []
    gate = asyncio.Semaphore(50)

    async def open_one(n):
        user = n % args.users
        async with gate:
            ws = await connect(
                ws_url,
                additional_headers={"Authorization": f"Bearer {world['tokens'][user]}"},
                open_timeout=60,
                max_queue=None,
                ping_interval=None,
            )
            panel = Panel(ws, user)
            panel.task = asyncio.create_task(panel.read(waiters))
            await asyncio.wait_for(panel.snapshot.wait(), 60)
            panels.append(panel)

    t = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(open_one(n) for n in range(args.panels))), remaining())
    connect_s = time.perf_counter() - t
    print(f"{len(panels)} panels connected in {connect_s:.1f} s", flush=True)

    api = httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {world['key']}"}, timeout=60
    )
    from asgiref.sync import sync_to_async

    from interactions.models import Ask, ProgressSession

    open_message_ids: dict[int, str] = {}

    async def progress_card(user: int) -> str:
        """The user's running progress card (sent, dry run, on first use)."""
        if user not in open_message_ids:
            progress = await api.put(
                f"/api/v1/sessions/{SESSION.format(user)}/progress",
                json={
                    "status": "running",
                    "title": "Bench",
                    "chat_id": "oc_bench_chat",
                    "requester_open_id": USER.format(user),
                },
            )
            assert progress.status_code in (200, 201), progress.text
            session = await sync_to_async(
                lambda: ProgressSession.objects.select_related("card").get(
                    bot__app_id=APP_ID, session_id=SESSION.format(user)
                )
            )()
            open_message_ids[user] = session.card.open_message_id
        return open_message_ids[user]

    encrypt_key = "bench-encrypt-key"

    ask_each, ask_all, post_ms, cancel_each, cancel_all, callback_ms = [], [], [], [], [], []
    ask_first, cancel_first = [], []
    for n in range(args.asks):
        remaining()
        user = n % args.users
        targets = [p for p in panels if p.user == user]
        open_message_id = await progress_card(user)
        t0 = time.perf_counter()
        response = await api.post(
            f"/api/v1/sessions/{SESSION.format(user)}/asks",
            json={"questions": QUESTIONS, "requester_open_id": USER.format(user)},
        )
        post_ms.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 201, response.text
        request_id = response.json()["requestId"]
        # Frames may already have arrived: count what is left.
        key = ("ask_user_questions", request_id)
        pending = sum(1 for p in targets if key not in p.seen)
        done = asyncio.Event()
        waiters[key] = [pending, done]
        if pending:
            await asyncio.wait_for(done.wait(), min(60, remaining()))
        times = [(p.seen[key] - t0) * 1000 for p in targets]
        ask_each.extend(times)
        ask_all.append(max(times))
        ask_first.append(min(times))

        form_index = await sync_to_async(
            lambda rid=request_id: Ask.objects.get(public_id=rid).form_index
        )()
        (q0, c0), (q1, c1) = (progress_cards.field_names(form_index, i) for i in (0, 1))
        payload = feishu.payload(
            "card_action_ask_submit",
            {
                "header.app_id": APP_ID,
                "header.token": "bench-verification-token",
                "event.operator.open_id": USER.format(user),
                "event.action.value.requestId": request_id,
                "event.action.value.sessionId": SESSION.format(user),
                "event.action.value.sender": USER.format(user),
                "event.context.open_message_id": open_message_id,
                "event.action.form_value": {q0: "1", c0: "", q1: ["0"], c1: ""},
            },
        )
        body, seal_headers = seal(payload, encrypt_key=encrypt_key)
        key = ("ask_user_questions_cancelled", request_id)
        t1 = time.perf_counter()
        answer = await api.post(f"/lark/{APP_ID}/callback", content=body, headers=seal_headers)
        callback_ms.append((time.perf_counter() - t1) * 1000)
        toast = answer.json().get("toast", {}).get("i18n", {}).get("zh_cn")
        assert answer.status_code == 200 and toast == "已提交", answer.text
        pending = sum(1 for p in targets if key not in p.seen)
        done = asyncio.Event()
        waiters[key] = [pending, done]
        if pending:
            await asyncio.wait_for(done.wait(), min(60, remaining()))
        times = [(p.seen[key] - t1) * 1000 for p in targets]
        cancel_each.extend(times)
        cancel_all.append(max(times))
        cancel_first.append(min(times))
        print(
            f"ask {n + 1}/{args.asks}: all panels {ask_all[-1]:.0f} ms, "
            f"cancel all {cancel_all[-1]:.0f} ms",
            flush=True,
        )

    await api.aclose()
    duplicates = sum(p.duplicates for p in panels)
    resyncs = sum(p.resyncs for p in panels)
    for panel in panels:
        await panel.ws.close()
        panel.task.cancel()
    return {
        "connect_s": connect_s,
        "ask_each": ask_each,
        "ask_all": ask_all,
        "ask_first": ask_first,
        "cancel_first": cancel_first,
        "post_ms": post_ms,
        "cancel_each": cancel_each,
        "cancel_all": cancel_all,
        "callback_ms": callback_ms,
        "duplicate_frames": duplicates,
        "resync_snapshots": resyncs,
    }


def run_on_daphne(env: dict, client) -> tuple[object, str, Path]:
    """Start one Daphne process with `env`, run `asyncio.run(client(url))` against it, stop it.

    Returns (the client's result, a line naming the machine — cores, Python, database, channel
    layer, load average at start and end — and the path of Daphne's log)."""
    from django.conf import settings
    from django.db import connection

    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    log_path = Path(tempfile.mkdtemp(prefix="cardloop-bench-")) / "daphne.log"
    process, url = start_daphne(env, log_path)
    load_before = os.getloadavg()
    try:
        result = asyncio.run(client(url))
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
    machine = (
        f"machine: {os.cpu_count()} cpu, {platform.python_implementation()} "
        f"{platform.python_version()}, {connection.vendor}, {layer}; "
        f"load avg at start {load_before[0]:.1f}, at end {os.getloadavg()[0]:.1f}"
    )
    return result, machine, log_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--panels", type=int, default=1000)
    parser.add_argument("--asks", type=int, default=20)
    parser.add_argument(
        "--users",
        type=int,
        default=1,
        help="spread the panels over this many users (1: every ask goes to every panel)",
    )
    parser.add_argument("--max-seconds", type=float, default=600)
    verdict.add_argument(parser)
    args = parser.parse_args()

    secret_dir = tempfile.mkdtemp(prefix="cardloop-bench-secrets-")
    env = configure(secret_dir)
    ensure_database(env.get("DATABASE_URL"))
    world = prepare(args.users)
    result, machine, log_path = run_on_daphne(env, lambda url: run(url, world, args))
    print()
    print(machine)
    print(
        f"{args.panels} panels of {args.users} user(s), one Daphne process; {args.asks} asks, "
        f"each to the {args.panels // args.users} panel(s) of one user"
    )
    print(f"connect (50 handshakes at a time)   {result['connect_s']:.1f} s")
    print(summary("POST asks (answer)", result["post_ms"]))
    print(summary("ask -> each panel", result["ask_each"]))
    print(summary("ask -> first panel", result["ask_first"]))
    print(summary("ask -> all panels", result["ask_all"]))
    print(summary("card callback (answer)", result["callback_ms"]))
    print(summary("card submit -> each panel cancel", result["cancel_each"]))
    print(summary("card submit -> first panel cancel", result["cancel_first"]))
    print(summary("card submit -> all panels cancel", result["cancel_all"]))
    repairs = sum(
        "resync repaired a lost push" in line
        for line in log_path.read_text(errors="replace").splitlines()
    )
    print(
        f"resync snapshots seen by panels       {result['resync_snapshots']} "
        f"(server log: {repairs} repair(s) of a lost push)"
    )
    print(f"daphne log: {log_path}")
    verdicts = verdict.Verdicts(f"panel fan-out, {args.panels} panels of {args.users} user(s)")
    verdicts.check(
        "duplicate frames", result["duplicate_frames"], "0", result["duplicate_frames"] == 0
    )
    verdicts.report()
    sys.exit(verdicts.exit_status(no_targets=args.no_targets))


if __name__ == "__main__":
    main()
