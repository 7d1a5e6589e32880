"""MCP ask round trip next to the REST long-poll: how long an agent waits for an answer that
arrives as a Feishu form submit, through `/mcp` (`ask_user_questions`, the real `mcp`
client) and through `POST …/asks` + `GET /api/v1/asks/<id>?wait=60`.

    [DATABASE_URL=postgres://postgres@127.0.0.1:5432/cl_mcp_bench] [REDIS_URL=…] \\
        .venv/bin/python bench/mcp_roundtrip.py [--asks 30] [--max-seconds 300]

What is measured (all on 127.0.0.1, the clients in this process, one Daphne child process):
- per path (REST long-poll; MCP with the initialize handshake, 2025-11-25; MCP on the
  2026-07-28 per-request protocol) and per ask, on one running progress session:
  - **register**: from the agent's first byte (REST: `POST …/asks`; MCP: `tools/call`) until
    the question is recorded (REST: the POST's answer; MCP: its row seen by a 5 ms poll of
    the database from this process — an upper bound);
  - **submit → answer**: the form is submitted as Feishu would (encrypted, signed
    `card.action.trigger` to `/lark/<app_id>/callback`); the clock starts before that POST
    and stops when the agent has the answers (REST: the long-poll's answer; MCP: the tool
    result);
  - **round trip**: register + submit → answer (what an agent waits beyond the human).
The bot has no app secret: Feishu calls are dry-run (logged, synthetic ids), no traffic leaves
the machine. Every wait is bounded and the run stops after `--max-seconds`. The database is
written to (a bot `cli_bench_mcp`, its sessions and asks): use a bench database.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from benchdb import ensure_database
from panel_fanout import configure, run_on_daphne, summary

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

APP_ID = "cli_bench_mcp"
USER = "ou_bench_mcp_user"
CHAT = "oc_bench_mcp_chat"
ENCRYPT_KEY = "bench-encrypt-key"
VERIFICATION_TOKEN = "bench-verification-token"


def prepare() -> dict:
    """Migrate; the bench bot (encrypt key + verification token, no app secret) and a bot API
    key. Previous bench asks are cancelled."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from botadmin.models import Bot, BotApiKey
    from interactions.models import Interaction
    from plumbing.secretstore import write_secret

    bot = Bot.objects.filter(app_id=APP_ID).first() or Bot.objects.create(
        app_id=APP_ID, name="MCP bench"
    )
    bot.encrypt_key_ref = write_secret(ENCRYPT_KEY)
    bot.verification_token_ref = write_secret(VERIFICATION_TOKEN)
    bot.save()
    Interaction.objects.filter(bot=bot, status="pending").update(status="cancelled")
    raw_key, lookup = BotApiKey.new_raw()
    key = BotApiKey(bot=bot, label="bench")
    key.set_raw(raw_key, lookup)
    key.save()
    return {"bot": bot, "key": raw_key}


async def run(url: str, world: dict, args) -> dict[str, dict[str, list[float]]]:
    import httpx
    import httpx2
    from asgiref.sync import sync_to_async
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from interactions.lark.signing import seal
    from interactions.models import Ask, ProgressSession
    from interactions.render import progress_cards
    from interactions.tests.ask_helpers import QUESTIONS
    from tests import feishu

    started = time.monotonic()

    def remaining() -> float:
        left = args.max_seconds - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError("--max-seconds reached")
        return left

    api = httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {world['key']}"}, timeout=90
    )

    async def session_card(session_id: str) -> str:
        answer = await api.put(
            f"/api/v1/sessions/{session_id}/progress",
            json={
                "status": "running",
                "title": "Bench",
                "chat_id": CHAT,
                "requester_open_id": USER,
            },
        )
        assert answer.status_code in (200, 201), answer.text
        return await sync_to_async(
            lambda: (
                ProgressSession.objects.select_related("card")
                .get(bot__app_id=APP_ID, session_id=session_id)
                .card.open_message_id
            )
        )()

    async def submit(session_id: str, request_id: str, open_message_id: str) -> None:
        form_index = await sync_to_async(lambda: Ask.objects.get(public_id=request_id).form_index)()
        (q0, c0), (q1, c1) = (progress_cards.field_names(form_index, i) for i in (0, 1))
        payload = feishu.payload(
            "card_action_ask_submit",
            {
                "header.app_id": APP_ID,
                "header.token": VERIFICATION_TOKEN,
                "event.operator.open_id": USER,
                "event.action.value.requestId": request_id,
                "event.action.value.sessionId": session_id,
                "event.action.value.sender": USER,
                "event.context.open_message_id": open_message_id,
                "event.action.form_value": {q0: "1", c0: "", q1: ["0"], c1: ""},
            },
        )
        body, headers = seal(payload, encrypt_key=ENCRYPT_KEY)
        answer = await api.post(f"/lark/{APP_ID}/callback", content=body, headers=headers)
        assert answer.status_code == 200, answer.text

    async def pending_ask(session_id: str, seen: set[str]) -> str:
        while True:
            found = await sync_to_async(
                lambda: list(
                    Ask.objects.filter(
                        bot__app_id=APP_ID, session_id=session_id, status="pending"
                    ).values_list("public_id", flat=True)
                )
            )()
            fresh = [rid for rid in found if rid not in seen]
            if fresh:
                return fresh[0]
            remaining()
            await asyncio.sleep(0.005)

    results: dict[str, dict[str, list[float]]] = {}

    # REST: POST asks, long-poll, submit
    session_id = f"bench_rest_{int(time.time())}"
    om_id = await session_card(session_id)
    rows = results["REST long-poll"] = {"register": [], "submit": [], "round": []}
    for n in range(args.asks):
        remaining()
        t0 = time.perf_counter()
        created = await api.post(
            f"/api/v1/sessions/{session_id}/asks",
            json={"questions": QUESTIONS, "requester_open_id": USER},
        )
        t_reg = time.perf_counter()
        assert created.status_code == 201, created.text
        request_id = created.json()["requestId"]
        poll = asyncio.ensure_future(api.get(f"/api/v1/asks/{request_id}", params={"wait": 60}))
        await asyncio.sleep(0.05)  # the long-poll is waiting (subscribed) before the submit
        t1 = time.perf_counter()
        await submit(session_id, request_id, om_id)
        state = (await asyncio.wait_for(poll, min(90, remaining()))).json()
        t2 = time.perf_counter()
        assert state["status"] == "answered", state
        rows["register"].append((t_reg - t0) * 1000)
        rows["submit"].append((t2 - t1) * 1000)
        rows["round"].append((t_reg - t0 + t2 - t1) * 1000)
        print(f"REST {n + 1}/{args.asks}: submit -> answer {(t2 - t1) * 1000:.0f} ms", flush=True)

    # MCP: one client per protocol era, one session each
    for label, modern in (("MCP (handshake 2025-11-25)", False), ("MCP (2026-07-28)", True)):
        session_id = f"bench_mcp_{int(modern)}_{int(time.time())}"
        om_id = await session_card(session_id)
        answer = await api.post(
            f"/api/v1/sessions/{session_id}/mcp-tokens",
            json={"chat_id": CHAT, "requester_open_id": USER},
        )
        assert answer.status_code == 201, answer.text
        token = answer.json()["token"]
        rows = results[label] = {"register": [], "submit": [], "round": []}
        seen: set[str] = set()
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {token}"},
                timeout=httpx2.Timeout(30, read=300),
            ) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await (session.discover() if modern else session.initialize())
            for n in range(args.asks):
                remaining()
                t0 = time.perf_counter()
                call = asyncio.ensure_future(
                    session.call_tool("ask_user_questions", {"questions": QUESTIONS})
                )
                request_id = await asyncio.wait_for(pending_ask(session_id, seen), 30)
                seen.add(request_id)
                t_reg = time.perf_counter()
                await asyncio.sleep(0.05)  # the call is waiting (subscribed) before the submit
                t1 = time.perf_counter()
                await submit(session_id, request_id, om_id)
                result = await asyncio.wait_for(call, min(90, remaining()))
                t2 = time.perf_counter()
                assert not result.is_error, result.content[0].text
                rows["register"].append((t_reg - t0) * 1000)
                rows["submit"].append((t2 - t1) * 1000)
                rows["round"].append((t_reg - t0 + t2 - t1) * 1000)
                print(
                    f"{label} {n + 1}/{args.asks}: submit -> answer {(t2 - t1) * 1000:.0f} ms",
                    flush=True,
                )
    await api.aclose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--asks", type=int, default=30)
    parser.add_argument("--max-seconds", type=float, default=300)
    args = parser.parse_args()

    secret_dir = tempfile.mkdtemp(prefix="cardloop-bench-secrets-")
    env = configure(secret_dir)
    ensure_database(env.get("DATABASE_URL"))
    world = prepare()
    results, machine, log_path = run_on_daphne(env, lambda url: run(url, world, args))
    print()
    print(machine)
    print(f"one Daphne process; {args.asks} asks per path, answered by a signed card submit")
    for label, rows in results.items():
        print(summary(f"{label}: register", rows["register"]))
        print(summary(f"{label}: submit -> answer", rows["submit"]))
        print(summary(f"{label}: round trip", rows["round"]))
    print(f"daphne log: {log_path}")


if __name__ == "__main__":
    main()
