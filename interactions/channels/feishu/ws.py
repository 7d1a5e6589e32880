"""Long-connection mode: `lark.ws.Client` for one app, feeding the same dispatcher as HTTP.

Run it as its own process, one per app (`python manage.py lark_connect <app_id>`); Feishu
delivers each message to one random connected client (cluster mode, ≤ 50 connections).

How it fits lark-oapi's long-connection client:
- the client gets its own new event loop, installed as lark-oapi's module-global loop before
  `start()` (lark-oapi captures an event loop when it is imported);
- frames arrive on that loop and lark-oapi calls `_do_without_validation` synchronously; the
  dispatcher runs all ORM work in its worker threads and waits at most the callback budget, so
  the loop's thread never touches the database (Django's ORM must not run on an event loop)
  and never blocks longer than the budget (2.0 s);
- no decryption or signature check happens here: the connection was authenticated with the
  app secret when it was opened;
- after a card action's answer frame has been written, held card updates are released (the
  answer-first rule, like the HTTP response's close hook);
- frames typed `card` (which lark-oapi 1.7.5 drops without an answer) are handled
  like `event` frames.
"""

from __future__ import annotations

import asyncio
import logging

import lark_oapi as lark
import lark_oapi.ws.client as ws_client_module
from lark_oapi.ws.const import HEADER_TYPE
from lark_oapi.ws.enum import MessageType
from lark_oapi.ws.exception import ClientException

from interactions.callbacks import dispatcher
from interactions.channels.feishu.ingress import CardloopEventDispatcher
from interactions.lark.client import domain_for

log = logging.getLogger(__name__)


def build_handler(bot) -> CardloopEventDispatcher:
    """The event handler the long connection calls (`_do_without_validation(payload_bytes)`)."""
    return CardloopEventDispatcher(bot, credentials=None)


class CardloopWsClient(lark.ws.Client):
    """`lark.ws.Client` that releases held card updates after each answer frame is written and
    treats `card` frames like `event` frames."""

    async def _handle_data_frame(self, frame) -> None:
        for header in frame.headers:
            if header.key == HEADER_TYPE and header.value == MessageType.CARD.value:
                header.value = MessageType.EVENT.value
        dispatcher.reset_after_answer()
        dispatcher.set_route("long_connection")  # this frame's task has a context of its own
        await super()._handle_data_frame(frame)
        after_answer = dispatcher.take_after_answer()
        if after_answer is not None:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(dispatcher.POOL, dispatcher.run_isolated, after_answer)
            except Exception:
                log.exception("releasing held card updates failed")


def build_client(bot) -> CardloopWsClient:
    """A long-connection client for `bot` (needs its app secret), on the bot's domain."""
    secret = bot.secret("app_secret")
    if not secret:
        raise ValueError(f"bot {bot.app_id} has no app secret; the long connection needs it")
    return CardloopWsClient(
        bot.app_id,
        secret,
        # lark-oapi logs the connection URL (with its ticket) at INFO: keep it at WARNING.
        log_level=lark.LogLevel.WARNING,
        event_handler=build_handler(bot),
        domain=domain_for(bot),
    )


class LongConnectionRefused(Exception):
    """Feishu refused to open the long connection (wrong app secret, connection limit reached,
    app not allowed): `code` and the endpoint's `msg`. Retrying cannot help, so it ends the
    process."""

    def __init__(self, code: int, msg: str):
        super().__init__(f"{code}: {msg}")
        self.code = code


def run_forever(bot) -> None:
    """Connect and serve until the process is stopped (blocks; `lark.ws.Client.start()` has no
    stop). A dropped connection is reopened by lark-oapi (endpoint discovery again, then the
    reconnect count, interval and jitter the endpoint's `ClientConfig` sets). Raises
    `LongConnectionRefused` when the endpoint refuses the app (lark-oapi's `ClientException`)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ws_client_module.loop = loop
    client = build_client(bot)
    log.info("long connection for %s starting (%s)", bot.app_id, domain_for(bot))
    try:
        client.start()
    except ClientException as error:
        raise LongConnectionRefused(error.code, error.args[0] if error.args else "") from None
