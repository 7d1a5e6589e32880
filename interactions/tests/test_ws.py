"""Long-connection mode (`lark_connect`): the dispatch path lark.ws.Client drives
(`_do_without_validation` on its event loop, the data-frame handler writing the answer frame),
without a real Feishu connection."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.utils import timezone
from lark_oapi.ws.enum import FrameType
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from botadmin.models import Chat
from interactions.callbacks import registry
from interactions.cardqueue import service as cards
from interactions.cardqueue.releases import RELEASES
from interactions.channels.feishu import ws
from interactions.models import CardUpdate, InboundEvent
from interactions.tests.test_cardjson import feedback_card
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


def _frame(payload: dict, frame_type: str = "event") -> Frame:
    frame = Frame()
    frame.method = FrameType.DATA.value
    frame.SeqID, frame.LogID, frame.service = 1, 1, 1
    for key, value in {
        "type": frame_type,
        "message_id": "msg-1",
        "trace_id": "trace-1",
        "sum": "1",
        "seq": "0",
    }.items():
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = json.dumps(payload).encode()
    return frame


def _serve(bot, *frames: Frame, write=None) -> list[bytes]:
    """Feed `frames` to a CardloopWsClient's data-frame handler on a fresh event loop (the
    client is built on that loop, as `lark_connect` does); returns the frames it wrote."""
    written: list[bytes] = []

    async def capture(data: bytes):
        if write is not None:
            await write(data)
        written.append(data)

    async def run():
        client = ws.CardloopWsClient(bot.app_id, "secret", event_handler=ws.build_handler(bot))
        client._write_message = capture
        for frame in frames:
            await client._handle_data_frame(frame)

    asyncio.run(run())
    return written


def _answer_of(data: bytes) -> dict:
    frame = Frame()
    frame.ParseFromString(data)
    response = json.loads(frame.payload)
    assert response["code"] == 200
    return json.loads(base64.b64decode(response["data"])) if response.get("data") else None


def test_handler_with_orm_work_answers_from_inside_a_running_event_loop(
    lark_bot, register_card_handler
):
    def handler(action):
        Chat.objects.create(
            chat_id="oc_from_ws"
        )  # would raise SynchronousOnlyOperation on the loop
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    handler_obj = ws.build_handler(lark_bot)
    raw = json.dumps(feishu.payload("card_action_feedback_click")).encode()

    async def on_the_loop():
        return handler_obj._do_without_validation(raw)

    answer = asyncio.run(on_the_loop())
    assert answer["toast"]["type"] == "success"
    assert Chat.objects.filter(chat_id="oc_from_ws").exists()
    assert InboundEvent.objects.count() == 1


def test_answer_frame_is_written_before_held_updates_are_released(
    lark_bot, lark_stub, register_card_handler
):
    entity = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat")
    register_card_handler(
        "feedback",
        lambda action: (
            cards.enqueue_elements(entity, {"fb_prompt": {"tag": "markdown", "content": "x"}})
            and registry.Answer.success("Recorded")
        ),
    )
    held_when_written = []

    def still_held():
        try:
            return CardUpdate.objects.get().hold_token != ""
        finally:
            connections.close_all()

    async def check(data: bytes):
        held_when_written.append(await asyncio.get_running_loop().run_in_executor(None, still_held))

    written = _serve(lark_bot, _frame(feishu.payload("card_action_feedback_click")), write=check)

    assert _answer_of(written[0])["toast"]["type"] == "success"
    assert held_when_written == [True]
    assert RELEASES.flush()  # the process's release batch after the answer
    row = CardUpdate.objects.get()
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()


def test_card_typed_frames_are_answered_like_event_frames(lark_bot, register_card_handler):
    register_card_handler("feedback", lambda action: registry.Answer.info("Seen"))
    written = _serve(lark_bot, _frame(feishu.payload("card_action_feedback_click"), "card"))
    assert _answer_of(written[0])["toast"]["i18n"]["en_us"] == "Seen"


def test_ordinary_event_over_the_long_connection_reaches_handlers_once(
    lark_bot, register_card_handler
):
    seen = []
    register_card_handler.event("im.message.receive_v1", seen.append)
    body = feishu.payload("im_message_receive")
    written = _serve(lark_bot, _frame(body), _frame(body))  # redelivered: deduplicated
    assert len(seen) == 1
    assert [_answer_of(data) for data in written] == [None, None]


def test_unknown_kind_and_raising_handler_still_answer_over_the_long_connection(
    lark_bot, register_card_handler
):
    def broken(action):
        raise RuntimeError("boom")

    register_card_handler("feedback", broken)
    unknown = feishu.payload("card_action_feedback_click", {"event.action.value.kind": "nope"})
    written = _serve(
        lark_bot, _frame(feishu.payload("card_action_feedback_click")), _frame(unknown)
    )
    assert [_answer_of(data)["toast"]["type"] for data in written] == ["error", "warning"]


def test_lark_connect_refuses_unknown_apps_and_bots_without_a_secret(make_bot):
    with pytest.raises(CommandError, match="No bot"):
        call_command("lark_connect", "cli_missing")
    make_bot(app_id="cli_no_secret")
    with pytest.raises(CommandError, match="no app secret"):
        call_command("lark_connect", "cli_no_secret")


def test_ws_client_uses_the_bots_domain(make_bot, settings):
    import lark_oapi as lark

    settings.CARDLOOP_LARK_DOMAIN = ""
    bot = make_bot(app_id="cli_lark_tenant", app_secret="s", domain="lark")

    async def build():
        return ws.build_client(bot)._domain

    assert asyncio.run(build()) == lark.LARK_DOMAIN
