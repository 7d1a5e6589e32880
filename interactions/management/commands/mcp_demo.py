"""`python manage.py mcp_demo [--url http://127.0.0.1:8000] [--app cli_demo_bot] [--no-answer]`:
run a real MCP client (the `mcp` SDK's `ClientSession` over Streamable HTTP) against a running
Cardloop (`make run`) and ask the user a question that a replayed Feishu card submit answers.

1. starts a progress card for a fresh demo session of the bot (dry run for the demo bot: the
   Feishu calls are logged, not sent) and issues a session-scoped MCP token (audited, 10 min);
2. prints the MCP client configuration (URL and `Authorization` header) for that token;
3. connects, lists the tools and calls `ask_user_questions` with the two questions of
   `tests/fixtures/feishu/card_action_ask_submit.json`;
4. once the question is on the card, prints the `lark_replay` command that answers it and,
   unless `--no-answer`, runs it (encrypted and signed as Feishu would, through the server's
   callback URL) — or run it yourself in another terminal;
5. prints the tool result: `{"answers": [{question, selectedLabels, customInput}]}`.

Needs the same database as the server (run it from the same checkout and environment).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import subprocess
import sys
import time
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from botadmin.models import Bot
from interactions.asks import progress
from interactions.mcp import tokens
from interactions.models import Ask

FIXTURE = Path(settings.BASE_DIR) / "tests" / "fixtures" / "feishu" / "card_action_ask_submit.json"
REQUESTER = "ou_requester"  # the fixture's operator
QUESTIONS = [
    {
        "question": "Which database should the service use?",
        "header": "Database",
        "options": [
            {"label": "SQLite", "description": "Single file, zero setup"},
            {"label": "PostgreSQL", "description": "Production grade"},
        ],
    },
    {
        "question": "Which checks should run before the deploy?",
        "header": "Checks",
        "options": [
            {"label": "Unit tests", "description": "pytest"},
            {"label": "Lint", "description": "ruff"},
            {"label": "Migrations", "description": "makemigrations --check"},
        ],
        "multiSelect": True,
    },
]


class Command(BaseCommand):
    help = "Ask a question through /mcp with a real MCP client; a replayed card submit answers."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="Cardloop base URL.")
        parser.add_argument("--app", default="cli_demo_bot", help="app_id of the bot.")
        parser.add_argument("--chat", default="oc_demo_team_chat", help="Chat of the session.")
        parser.add_argument(
            "--no-answer", action="store_true", help="Only print the lark_replay command."
        )
        parser.add_argument("--timeout", type=int, default=300, help="Seconds the ask waits.")

    def handle(self, *args, url, app, chat, no_answer, timeout, **options):
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per MCP POST
        bot = Bot.objects.filter(app_id=app).first()
        if bot is None:
            raise CommandError(f"No bot with app_id {app!r} (run `make run` first: it seeds it).")
        if not bot.has_secret("encrypt_key") or not bot.has_secret("verification_token"):
            raise CommandError(
                f"Bot {app!r} has no callback secrets, so no submit can be replayed."
            )
        session_id = f"mcp_demo_{secrets.token_hex(4)}"
        session = progress.update_progress(
            bot,
            session_id,
            status="running",
            title="MCP demo",
            summary="An agent asks through /mcp",
            receive_id=chat,
            requester_open_id=REQUESTER,
        ).session
        raw, _token = tokens.issue_token(
            "mcp_demo",
            bot,
            session_id,
            chat_id=chat,
            requester_open_id=REQUESTER,
            ttl_seconds=600,
            label="mcp_demo",
        )
        endpoint = f"{url.rstrip('/')}/mcp"
        config = {
            "mcpServers": {
                "cardloop": {
                    "type": "http",
                    "url": endpoint,
                    "headers": {"Authorization": f"Bearer {raw}"},
                }
            }
        }
        self.stdout.write(f"session {session_id}; MCP client configuration (valid 10 minutes):")
        self.stdout.write(json.dumps(config, indent=2))
        replay = self._replay_command(url, app, session_id, session.card.open_message_id)
        result = asyncio.run(self._run(endpoint, raw, bot, session_id, replay, no_answer, timeout))
        self.stdout.write("tool result:")
        self.stdout.write(json.dumps(result, ensure_ascii=False, indent=2))
        if result.get("isError"):
            raise CommandError("The question was not answered.", returncode=1)

    def _replay_command(self, url, app, session_id, open_message_id) -> list[str]:
        return [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "lark_replay",
            str(FIXTURE.relative_to(settings.BASE_DIR)),
            "--app",
            app,
            "--url",
            url,
            "--set",
            f"event.action.value.sessionId={session_id}",
            "--set",
            "event.action.value.requestId={request_id}",
            "--set",
            f"event.context.open_message_id={open_message_id}",
        ]

    async def _run(self, endpoint, raw, bot, session_id, replay, no_answer, timeout) -> dict:
        import httpx2
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async def progress(done, total, message):
            self.stdout.write(f"  … waiting {done:.0f} s of {total:.0f} s")

        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {raw}"},
                timeout=httpx2.Timeout(30, read=timeout + 60),
            ) as http,
            streamable_http_client(endpoint, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            info = await session.initialize()
            listed = await session.list_tools()
            self.stdout.write(
                f"connected ({info.protocol_version}); tools: "
                + ", ".join(tool.name for tool in listed.tools)
            )
            call = asyncio.ensure_future(
                session.call_tool(
                    "ask_user_questions",
                    {"questions": QUESTIONS, "timeout_seconds": timeout},
                    progress_callback=progress,
                )
            )
            request_id = await self._wait_for_ask(bot, session_id, call)
            command = [part.replace("{request_id}", request_id) for part in replay]
            shown = " ".join(command[1:]).replace(str(settings.BASE_DIR) + "/", "")
            self.stdout.write(f"asked {request_id}; answer it with:\n  python {shown}")
            if not no_answer:
                await asyncio.sleep(1)
                done = await asyncio.to_thread(
                    subprocess.run, command, capture_output=True, text=True, timeout=60
                )
                # POST line and status; the answer body (toast and whole card) is long
                self.stdout.write("\n".join(done.stdout.strip().splitlines()[:2]))
                if done.returncode:
                    self.stderr.write(done.stderr.strip())
            result = await call
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def _wait_for_ask(self, bot, session_id, call) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if call.done():  # failed at once (e.g. no channel)
                result = call.result()
                raise CommandError(f"The call answered at once: {result.content[0].text}")
            found = await sync_to_async(
                lambda: (
                    Ask.objects.filter(bot=bot, session_id=session_id)
                    .values_list("public_id", flat=True)
                    .first()
                )
            )()
            if found:
                return found
            await asyncio.sleep(0.2)
        raise CommandError("The question did not appear within 30 s.")
