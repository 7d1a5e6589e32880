"""Panel fan-out: question panels (WebSocket clients of `/ws/panel/`) connected to Daphne; how
long an ask takes from registration to every panel of its user, and a card submit from the
Feishu callback to the cancellation on every panel.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/cl_panel_bench \\
        .venv/bin/python bench/panel_fanout.py [--panels 1000] [--users 1] [--asks 20]
    # both shapes in one sitting: 1000 panels of one user and 1 panel of another, asks alternating
    … bench/panel_fanout.py --side-by-side --panels 1000 --asks 50
    # 5000 panels, one per user, over 2 Daphne processes (needs REDIS_URL)
    REDIS_URL=redis://127.0.0.1:6379/4 … bench/panel_fanout.py --panels 5000 --users 5000 \\
        --processes 2 --asks 50

What is measured (all on 127.0.0.1, the clients in this process, Daphne in child processes):
- server: `--processes N` Daphne processes (`cardloop.webserver`, each on its own SO_REUSEPORT
  socket of one port, as `manage.py serve --web-processes N` runs them: `bench/webprocs.py`);
  more than one needs the Redis channel layer (REDIS_URL), which the script checks first.
- connect: the panels connect with a desktop token per user (`Authorization: Bearer`), 50
  handshakes at a time; each must get its snapshot. `--users U`: panel n belongs to user
  n % U. `--side-by-side`: `--panels` panels belong to one user and 1 panel to another.
- ask → panels: for each ask, the clock starts just before `POST /api/v1/sessions/<id>/asks`
  (bot API key) and stops for each panel of the asked user when its `ask_user_questions`
  frame for that request arrives; "all" is the last panel's time. `--users U`: ask n goes to
  user n % U (`--asks` asks). `--side-by-side`: `--asks` asks to each of the two users,
  alternating which goes first, so both shapes share the machine's state and load.
- card submit → panels: the ask's form is submitted as Feishu would (encrypted and signed
  `card.action.trigger`, `POST /lark/<app_id>/callback`); the clock starts before the POST and
  stops per panel at its `ask_user_questions_cancelled` (reason `answered`). The callback's
  own answer time is reported too.
Figures are printed per shape (panels of the asked user). Targets (`bench/verdict.py`): no
duplicate frame; `--side-by-side`: ask → each panel p99 of the many panels ≤ 5 × that of the
single panel; one panel per user (`--users` = `--panels`): ask → its panel p99 < 100 ms.
Every wait is per panel (a panel counts once, whatever it is sent) and bounded; the run stops
after `--max-seconds`. Frames a panel is sent twice and resync snapshots are counted and
printed. The soft limit of open files is raised (up to the hard limit) when the panels need
more; the Daphne processes inherit it. The bench process freezes its heap (`gc.freeze`) once
the panels are connected and does not collect while asks are measured, so its own full
collections do not land inside a measured ask. The bot has no app secret, so Feishu calls are dry-run
(logged, synthetic ids): no traffic leaves the machine. The bench database is written to (a
bot `cli_bench_panel`, its sessions and asks) and the channel layer's Redis too: use a bench
database and a Redis database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import secrets
import sys
import tempfile
import time
from pathlib import Path

import verdict
from benchdb import ensure_database
from webprocs import WebProcesses

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


def layout(args) -> tuple[int, list[int], list[int]]:
    """(users to prepare, the user of each panel, the user of each ask, in order).

    `--side-by-side`: user 0 has `--panels` panels, user 1 has one; `--asks` rounds, each an
    ask to both users, the single panel's first in even rounds and second in odd ones.
    Otherwise panel n and ask n belong to user n % `--users`."""
    if args.side_by_side:
        asks = [user for n in range(args.asks) for user in ((1, 0) if n % 2 == 0 else (0, 1))]
        return 2, [0] * args.panels + [1], asks
    return (
        args.users,
        [n % args.users for n in range(args.panels)],
        [n % args.users for n in range(args.asks)],
    )


def raise_open_files_limit(needed: int) -> str:
    """Raise this process's soft RLIMIT_NOFILE to at least `needed` (up to the hard limit; the
    Daphne processes inherit it). Returns a line saying what was done; exits the bench when
    the hard limit is below `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft >= needed:
        return f"open files: soft limit {soft} (≥ {needed} needed), left as it is"
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(
            f"open files: {needed} needed but the hard limit is {hard}; raise it (ulimit -Hn) "
            "or run fewer panels"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return (
        f"open files: soft limit raised from {soft} to {hard} (for {needed}; inherited by Daphne)"
    )


async def run(url: str, world: dict, args) -> dict:
    import httpx
    from asgiref.sync import sync_to_async
    from django.db.models import Count
    from websockets.asyncio.client import connect

    # Project modules after Django is set up (`configure`); the questions are the ones the
    # ask tests use (one single-select, one multi-select).
    from interactions.lark.signing import seal
    from interactions.models import Ask, PanelPresence, ProgressSession
    from interactions.render import progress_cards
    from interactions.tests.ask_helpers import QUESTIONS
    from tests import feishu

    started = time.monotonic()

    def remaining() -> float:
        left = args.max_seconds - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError("--max-seconds reached")
        return left

    _users, panel_users, ask_users = layout(args)
    ws_url = url.replace("http://", "ws://") + "/ws/panel/"
    waiters: dict = {}
    panels: list[Panel] = []
    gate = asyncio.Semaphore(50)

    async def open_one(user):
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
    await asyncio.wait_for(asyncio.gather(*(open_one(u) for u in panel_users)), remaining())
    connect_s = time.perf_counter() - t
    per_process = await sync_to_async(
        lambda: sorted(
            PanelPresence.objects.filter(bot=world["bot"])
            .order_by()
            .values("server")
            .annotate(n=Count("id"))
            .values_list("n", flat=True)
        )
    )()
    print(
        f"{len(panels)} panels connected in {connect_s:.1f} s "
        f"(per process: {' / '.join(str(n) for n in per_process)})",
        flush=True,
    )
    # The clients are the measuring instrument, not the system under test: their thousands of
    # connection objects made this process's full garbage collections take 150–220 ms, and one
    # landing inside an ask set that shape's p99. Freeze what connecting allocated so the
    # collector skips it, and stop collecting while asks are measured: the frames the panels
    # keep grew the unfrozen heap until full collections took 130–170 ms again (measured with
    # a `gc.callbacks` probe). Collection resumes after the asks. The server's own
    # collections stay in the figures.
    gc.collect()
    gc.freeze()
    gc.disable()

    api = httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {world['key']}"}, timeout=60
    )

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

    async def arrivals(key: tuple[str, str], targets: list[Panel], t0: float) -> list[float]:
        """Wait (bounded) until every target panel saw `key`; each one's ms since `t0`.
        Frames may already have arrived: count what is left."""
        pending = sum(1 for p in targets if key not in p.seen)
        done = asyncio.Event()
        waiters[key] = [pending, done]
        if pending:
            await asyncio.wait_for(done.wait(), min(60, remaining()))
        return [(p.seen[key] - t0) * 1000 for p in targets]

    encrypt_key = "bench-encrypt-key"
    by_user = {}
    for panel in panels:
        by_user.setdefault(panel.user, []).append(panel)
    shapes: dict[int, dict[str, list[float]]] = {}  # panels of the asked user → figures
    for n, user in enumerate(ask_users):
        remaining()
        targets = by_user[user]
        figures = shapes.setdefault(len(targets), {})

        def note(name: str, values: list[float], figures=figures) -> None:
            figures.setdefault(name, []).extend(values)

        open_message_id = await progress_card(user)
        t0 = time.perf_counter()
        response = await api.post(
            f"/api/v1/sessions/{SESSION.format(user)}/asks",
            json={"questions": QUESTIONS, "requester_open_id": USER.format(user)},
        )
        note("post_ms", [(time.perf_counter() - t0) * 1000])
        assert response.status_code == 201, response.text
        request_id = response.json()["requestId"]
        times = await arrivals(("ask_user_questions", request_id), targets, t0)
        note("ask_each", times)
        note("ask_all", [max(times)])
        note("ask_first", [min(times)])

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
        t1 = time.perf_counter()
        answer = await api.post(f"/lark/{APP_ID}/callback", content=body, headers=seal_headers)
        note("callback_ms", [(time.perf_counter() - t1) * 1000])
        toast = answer.json().get("toast", {}).get("i18n", {}).get("zh_cn")
        assert answer.status_code == 200 and toast == "已提交", answer.text
        cancel = await arrivals(("ask_user_questions_cancelled", request_id), targets, t1)
        note("cancel_each", cancel)
        note("cancel_all", [max(cancel)])
        note("cancel_first", [min(cancel)])
        print(
            f"ask {n + 1}/{len(ask_users)} to {len(targets)} panel(s): all panels "
            f"{max(times):.0f} ms, cancel all {max(cancel):.0f} ms",
            flush=True,
        )

    gc.enable()
    await api.aclose()
    duplicates = sum(p.duplicates for p in panels)
    resyncs = sum(p.resyncs for p in panels)
    for panel in panels:
        await panel.ws.close()
        panel.task.cancel()
    return {
        "connect_s": connect_s,
        "per_process": per_process,
        "shapes": shapes,
        "duplicate_frames": duplicates,
        "resync_snapshots": resyncs,
    }


def run_on_daphne(env: dict, processes: int, client) -> tuple[object, str, Path]:
    """Start `processes` Daphne processes with `env` (`webprocs.WebProcesses`), run
    `asyncio.run(client(url))` against them, stop them.

    Returns (the client's result, a line naming the machine — cores, Python, database, channel
    layer, processes, load average at start and end — and the path of Daphne's log)."""
    from django.conf import settings
    from django.db import connection

    layer = settings.CHANNEL_LAYERS["default"]["BACKEND"].rsplit(".", 1)[-1]
    log_path = Path(tempfile.mkdtemp(prefix="cardloop-bench-")) / "daphne.log"
    servers = WebProcesses.start(env, processes, log_path)
    load_before = os.getloadavg()
    try:
        result = asyncio.run(client(servers.url))
    finally:
        servers.stop(15)
    machine = (
        f"machine: {os.cpu_count()} cpu, {platform.python_implementation()} "
        f"{platform.python_version()}, {connection.vendor}, {layer}, {processes} Daphne "
        f"process(es); load avg at start {load_before[0]:.1f}, at end {os.getloadavg()[0]:.1f}"
    )
    return result, machine, log_path


def print_shape(panels_per_user: int, figures: dict[str, list[float]]) -> None:
    asks = len(figures["post_ms"])
    print()
    print(f"asks to a user with {panels_per_user} panel(s): {asks}")
    print(summary("POST asks (answer)", figures["post_ms"]))
    print(summary("ask -> each panel", figures["ask_each"]))
    print(summary("ask -> first panel", figures["ask_first"]))
    print(summary("ask -> all panels", figures["ask_all"]))
    print(summary("card callback (answer)", figures["callback_ms"]))
    print(summary("card submit -> each panel cancel", figures["cancel_each"]))
    print(summary("card submit -> first panel cancel", figures["cancel_first"]))
    print(summary("card submit -> all panels cancel", figures["cancel_all"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--panels", type=int, default=1000)
    parser.add_argument(
        "--asks", type=int, default=20, help="asks (--side-by-side: asks to each of the 2 users)"
    )
    parser.add_argument(
        "--users",
        type=int,
        default=1,
        help="spread the panels over this many users (1: every ask goes to every panel)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="--panels panels of one user and 1 panel of another in the same run, asks "
        "alternating; the ratio of their p99 is a target (--users is ignored)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="Daphne processes on one SO_REUSEPORT port (more than 1 needs REDIS_URL)",
    )
    parser.add_argument("--max-seconds", type=float, default=600)
    verdict.add_argument(parser)
    args = parser.parse_args()
    if args.panels < 1 or args.asks < 1 or args.users < 1 or args.processes < 1:
        parser.error("--panels, --asks, --users and --processes must be at least 1")
    if not args.side_by_side and args.users > args.panels:
        parser.error("--users must not exceed --panels (every user needs a panel)")
    if args.processes > 1 and not os.environ.get("REDIS_URL"):
        parser.error(
            "--processes > 1 needs REDIS_URL: the in-memory channel layer reaches one process "
            "only, so panels on the other processes would miss the pushes"
        )

    users, panel_users, _asks = layout(args)
    # the clients' sockets here, the servers' (inherited) there, plus databases and Redis
    print(raise_open_files_limit(len(panel_users) + 1024), flush=True)
    secret_dir = tempfile.mkdtemp(prefix="cardloop-bench-secrets-")
    env = configure(secret_dir)
    ensure_database(env.get("DATABASE_URL"))
    world = prepare(users)
    result, machine, log_path = run_on_daphne(
        env, args.processes, lambda url: run(url, world, args)
    )
    print()
    print(machine)
    how = (
        f"{args.panels} panels of one user and 1 panel of another, side by side"
        if args.side_by_side
        else f"{args.panels} panels of {args.users} user(s)"
    )
    print(
        f"{how}; {args.processes} Daphne process(es) "
        f"(panels per process: {' / '.join(str(n) for n in result['per_process'])})"
    )
    print(f"connect (50 handshakes at a time)   {result['connect_s']:.1f} s")
    shapes = result["shapes"]
    for panels_per_user in sorted(shapes):
        print_shape(panels_per_user, shapes[panels_per_user])
    repairs = sum(
        "resync repaired a lost push" in line
        for line in log_path.read_text(errors="replace").splitlines()
    )
    print()
    print(
        f"resync snapshots seen by panels       {result['resync_snapshots']} "
        f"(server log: {repairs} repair(s) of a lost push)"
    )
    print(f"daphne log: {log_path}")
    verdicts = verdict.Verdicts(f"panel fan-out, {how}, {args.processes} process(es)")
    verdicts.check(
        "duplicate frames", result["duplicate_frames"], "0", result["duplicate_frames"] == 0
    )
    for what, measured, target, met in targets(args, shapes):
        verdicts.check(what, measured, target, met)
    verdicts.report()
    sys.exit(verdicts.exit_status(no_targets=args.no_targets))


def targets(args, shapes: dict[int, dict[str, list[float]]]) -> list[tuple[str, float, str, bool]]:
    """The speed targets this run's shape has, as verdict rows `(what, measured, target, met)`:
    `--side-by-side`: ask → each panel p99 of the user with many panels ÷ that of the user
    with one, ≤ 5; one panel per user: ask → its panel p99 < 100 ms."""
    rows = []
    if args.side_by_side:
        many, one = shapes[max(shapes)], shapes[min(shapes)]
        ratio = pct(many["ask_each"], 99) / pct(one["ask_each"], 99)
        rows.append(
            (f"ask p99: {max(shapes)} panels ÷ 1 panel (same run)", ratio, "<= 5", ratio <= 5)
        )
    elif set(shapes) == {1}:
        p99 = pct(shapes[1]["ask_each"], 99)
        rows.append(("ask -> its panel p99 (ms), 1 panel per user", p99, "< 100", p99 < 100))
    return rows


if __name__ == "__main__":
    main()
