"""Feedback clicks end to end: a delivery created through the API (real lark-oapi client against
the stub), signed + encrypted `card.action.trigger` callbacks through the ingress, revisions,
events, and the CardKit element updates applied after the answer.

How a click can go wrong on the feedback path, each covered here (ingress-level cases that do
not depend on the handler live in interactions/tests/test_ingress.py): encrypted bodies (every
click here is encrypted; undecryptable → 400, nothing written); v1 or upper-case signatures →
401 and no revision; repeats and double clicks answer as the first click; every answer is a
JSON toast; form_value reaches the revision; the values come from the rendered card's
behaviors; answers are toast-only (the card is updated after); cards are `update_multi` and
never PUT to messages.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time

import pytest
from django.db import connections

from feedback import cards as feedback_cards
from feedback.models import Delivery, Event, LatestFeedback, Revision
from feedback.tests.conftest import FULL_POLICY, drain_card_updates
from interactions.cardqueue.releases import RELEASES
from interactions.lark.signing import seal
from interactions.models import CardUpdate, InboundEvent
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


def stub_area(feedback_api, delivery) -> dict:
    """The feedback area as the stub's card entity now holds it (element_id → element)."""
    card = feedback_api.stub.cards[delivery.card_id].card
    return {e["element_id"]: e for e in card["body"]["elements"] if e.get("element_id")}


def button_values(area) -> dict[str, dict]:
    return {
        col["elements"][0]["behaviors"][0]["value"]["key"]: col["elements"][0]
        for col in area[feedback_cards.BUTTONS]["columns"]
    }


def current_rev(delivery) -> str:
    delivery.refresh_from_db()
    return delivery.current_revision.revision_id if delivery.current_revision_id else ""


def test_click_records_a_revision_answers_a_toast_and_updates_the_card_after_the_answer(
    feedback_api, delivery, click
):
    status, answer = click(delivery, "conclusive_usable")
    assert status == 200
    assert answer == {
        "toast": {
            "type": "success",
            "content": "已记录：结论可用",
            "i18n": {"zh_cn": "已记录：结论可用", "en_us": "Recorded: Usable conclusion"},
        }
    }  # toast only: the final answer's card is never re-sent in the answer
    revision = Revision.objects.get()
    assert (revision.operator_open_id, revision.verdict_key, revision.semantic) == (
        "ou_requester",
        "conclusive_usable",
        "positive",
    )
    assert (revision.revision, revision.supersedes) == (1, None)
    latest = LatestFeedback.objects.get()
    assert (latest.revision, latest.semantic) == (revision, "positive")
    delivery.refresh_from_db()
    assert delivery.current_revision == revision
    event = Event.objects.get(type="feedback.revised")
    assert json.loads(event.body)["data"]["revision_id"] == revision.revision_id

    assert drain_card_updates() == 1
    stub = feedback_api.stub
    (update,) = stub.calls_to("POST", f"/open-apis/cardkit/v1/cards/{delivery.card_id}/")
    assert update.path.endswith("/batch_update")
    assert stub.cards[delivery.card_id].sequences == [1]
    area = stub_area(feedback_api, delivery)
    assert area[feedback_cards.STATUS]["content"] == "已选择：**结论可用**"
    buttons = button_values(area)
    assert all(b["behaviors"][0]["value"]["rev"] == revision.revision_id for b in buttons.values())
    assert buttons["conclusive_usable"]["text"]["content"] == "✓ 结论可用"
    assert stub.cards[delivery.card_id].card["body"]["elements"][0]["content"] == "The answer"
    feishu.assert_valid_card(stub.cards[delivery.card_id].card)
    assert stub.calls_to("PUT", "/open-apis/im/v1/messages") == []  # updated, never re-sent


def test_reselect_appends_to_the_chain_and_sequences_keep_increasing(feedback_api, delivery, click):
    click(delivery, "conclusive_usable")
    drain_card_updates()
    status, answer = click(delivery, "effective_progress", rev=current_rev(delivery))
    assert answer["toast"]["type"] == "success"
    drain_card_updates()
    first, second = Revision.objects.order_by("revision")
    assert (second.revision, second.supersedes, second.semantic) == (2, first, "progress")
    assert LatestFeedback.objects.get().revision == second
    assert Event.objects.filter(type="feedback.revised").count() == 2
    assert feedback_api.stub.cards[delivery.card_id].sequences == [1, 2]
    area = stub_area(feedback_api, delivery)
    assert area[feedback_cards.STATUS]["content"] == "已选择：**有效推进**"


def test_non_requester_gets_toast_and_nothing_is_written(delivery, click):
    status, answer = click(delivery, "conclusive_usable", operator="ou_someone_else")
    assert status == 200
    assert answer["toast"]["type"] == "warning"
    assert answer["toast"]["i18n"]["zh_cn"] == "仅本次提问者可反馈"
    assert answer["toast"]["i18n"]["en_us"].startswith("Only the person who asked")
    assert not Revision.objects.exists() and not Event.objects.filter(type="feedback.revised")
    assert not CardUpdate.objects.exists()


def test_operator_comes_from_the_callback_never_from_the_value(delivery, click):
    body = click.payload(delivery, "conclusive_usable", operator="ou_intruder")
    body["event"]["action"]["value"]["operator"] = "ou_requester"
    body["event"]["action"]["value"]["open_id"] = "ou_requester"
    _, answer = click.post(body)
    assert answer["toast"]["i18n"]["zh_cn"] == "仅本次提问者可反馈"
    assert not Revision.objects.exists()


def test_audience_everyone_lets_anyone_in_the_chat_vote_once_each(feedback_api, click):
    feedback_api.bot.policy = {"enabled": True, "audience": "everyone"}
    feedback_api.bot.save()
    body = feedback_api.deliver().json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert click(delivery, "incorrect", operator="ou_a")[1]["toast"]["type"] == "success"
    rev = current_rev(delivery)
    assert click(delivery, "conclusive_usable", rev=rev, operator="ou_b")[1]["toast"]["type"] == (
        "success"
    )
    # another chat's click on this delivery is refused
    _, answer = click(
        delivery,
        "incorrect",
        rev=current_rev(delivery),
        operator="ou_c",
        event__context__open_chat_id="oc_other",
    )
    assert answer["toast"]["type"] == "warning"
    # a second choice of ou_a is refused (reselect off), and the card repaints
    _, answer = click(delivery, "conclusive_usable", rev=current_rev(delivery), operator="ou_a")
    assert answer["toast"]["type"] == "info"
    assert answer["toast"]["i18n"]["zh_cn"] == "已选择：结论有误，不能修改"
    assert sorted(LatestFeedback.objects.values_list("operator_open_id", "semantic")) == [
        ("ou_a", "negative"),
        ("ou_b", "positive"),
    ]


def test_reviewers_audience_is_the_frozen_list(feedback_api, click):
    feedback_api.bot.policy = {"enabled": True, "audience": "reviewers", "reviewers": ["ou_rev"]}
    feedback_api.bot.save()
    delivery = Delivery.objects.get(
        delivery_id=feedback_api.deliver(requester_open_id="").json()["delivery_id"]
    )
    _, answer = click(delivery, "conclusive_usable")  # the requester is no reviewer
    assert answer["toast"]["i18n"]["zh_cn"] == "仅指定评审人可反馈"
    feedback_api.bot.policy = {"enabled": True, "audience": "reviewers", "reviewers": ["ou_new"]}
    feedback_api.bot.save()
    assert click(delivery, "conclusive_usable", operator="ou_rev")[1]["toast"]["type"] == "success"


def test_allow_reselect_off_locks_the_first_choice_and_shows_disabled_buttons(feedback_api, click):
    feedback_api.bot.policy = {"enabled": True}
    feedback_api.bot.save()
    delivery = Delivery.objects.get(delivery_id=feedback_api.deliver().json()["delivery_id"])
    click(delivery, "effective_progress")
    drain_card_updates()
    buttons = button_values(stub_area(feedback_api, delivery))
    assert all(b["disabled"] for b in buttons.values())
    _, answer = click(delivery, "conclusive_usable", rev=current_rev(delivery))
    assert answer["toast"]["type"] == "info"
    assert answer["toast"]["i18n"]["zh_cn"] == "已选择：有效推进，不能修改"
    assert Revision.objects.count() == 1
    assert drain_card_updates() == 1  # the repaint
    assert stub_area(feedback_api, delivery)[feedback_cards.STATUS]["content"] == (
        "已选择：**有效推进**"
    )


def test_stale_click_gets_a_toast_and_a_repaint_and_writes_nothing(feedback_api, delivery, click):
    """upvote → negative → a delayed upvote made on the first card state: refused, repainted."""
    click(delivery, "conclusive_usable")
    first = current_rev(delivery)
    click(delivery, "incorrect", rev=first)
    drain_card_updates()
    _, answer = click(delivery, "conclusive_usable", rev=first)
    assert answer["toast"]["type"] == "warning"
    assert answer["toast"]["i18n"]["zh_cn"] == "卡片已过期并已刷新，请重新选择"
    assert Revision.objects.count() == 2
    assert LatestFeedback.objects.get().semantic == "negative"
    assert drain_card_updates() == 1
    area = stub_area(feedback_api, delivery)
    assert area[feedback_cards.STATUS]["content"] == "已选择：**结论有误**"
    assert area[feedback_cards.DETAIL]["tag"] == "form"


def test_unknown_key_unknown_delivery_and_another_message_are_refused(
    feedback_api, delivery, click
):
    _, answer = click(delivery, "not_a_key")
    assert answer["toast"]["i18n"]["zh_cn"] == "该选项已失效"
    body = click.payload(delivery, "conclusive_usable")
    body["event"]["action"]["value"]["delivery"] = "del_unknown"
    assert click.post(body)[1]["toast"]["i18n"]["zh_cn"] == "反馈目标不存在或已失效"
    _, answer = click(delivery, "conclusive_usable", event__context__open_message_id="om_other")
    assert answer["toast"]["i18n"]["zh_cn"] == "反馈目标不存在或已失效"
    progress = Delivery.objects.get(
        delivery_id=feedback_api.deliver(response_kind="progress").json()["delivery_id"]
    )
    assert click(progress, "conclusive_usable")[1]["toast"]["type"] == "warning"
    assert not Revision.objects.exists()


def test_semantic_comes_from_the_snapshot_not_from_the_click(delivery, click):
    body = click.payload(delivery, "incorrect")
    body["event"]["action"]["value"]["semantic"] = "positive"
    click.post(body)
    assert Revision.objects.get().semantic == "negative"


def test_unchanged_choice_writes_nothing(delivery, click):
    click(delivery, "conclusive_usable")
    _, answer = click(delivery, "conclusive_usable", rev=current_rev(delivery))
    assert answer["toast"]["type"] == "info"
    assert answer["toast"]["i18n"]["zh_cn"] == "你已选择：结论可用"
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1


def test_same_event_id_twice_and_a_second_event_of_the_same_click_write_one_revision(
    delivery, click
):
    """(a) A redelivery of one event_id, (c) a genuine second click with a new event_id
    before the card moved on, (d) a different choice appends."""
    body = click.payload(delivery, "conclusive_usable")
    first = click.post(body)
    repeat = click.post(body)
    second_click = click(delivery, "conclusive_usable")  # new event_id, same card state
    assert (
        first[1]["toast"]["i18n"] == repeat[1]["toast"]["i18n"] == second_click[1]["toast"]["i18n"]
    )
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    click(delivery, "incorrect", rev=current_rev(delivery))
    parent, child = Revision.objects.order_by("revision")
    assert child.supersedes == parent


def test_negative_choice_opens_the_form_on_the_same_card(feedback_api, delivery, click):
    _, answer = click(delivery, "incorrect")
    assert answer["toast"]["i18n"]["zh_cn"] == "已记录，可在下方补充原因"
    assert "card" not in answer
    drain_card_updates()
    form = stub_area(feedback_api, delivery)[feedback_cards.DETAIL]
    assert form["tag"] == "form"
    fields = {e.get("name"): e for e in form["elements"]}
    assert [o["value"] for o in fields["fb_reason"]["options"]] == ["wrong_facts", "incomplete"]
    assert fields["fb_detail_submit"]["behaviors"][0]["value"] == {
        "kind": "feedback_detail",
        "delivery": delivery.delivery_id,
        "rev": current_rev(delivery),
    }


def test_details_are_stored_trimmed_and_the_comment_is_never_shown_or_logged(
    feedback_api, delivery, click, caplog
):
    """form_value reaches the revision; unknown form keys are ignored."""
    caplog.set_level(logging.DEBUG)
    click(delivery, "incorrect")
    rev = current_rev(delivery)
    secret_comment = "  the citation is from 2019 ✅ zzq-comment-marker  "
    status, answer = click.detail(
        delivery,
        rev,
        {"fb_reason": "incomplete", "fb_comment": secret_comment, "x_injected": "1"},
    )
    assert status == 200
    assert answer["toast"]["i18n"]["zh_cn"] == "已收到补充说明，谢谢"
    latest = Revision.objects.order_by("-revision").first()
    assert (latest.revision, latest.verdict_key, latest.semantic) == (2, "incorrect", "negative")
    assert (latest.reason_key, latest.comment) == ("incomplete", secret_comment.strip())
    assert latest.supersedes.revision == 1
    assert LatestFeedback.objects.get().reason_key == "incomplete"
    event = Event.objects.filter(type="feedback.revised").order_by("-pk").first()
    assert "zzq-comment-marker" not in event.body
    assert json.loads(event.body)["data"]["has_comment"] is True
    drain_card_updates()
    card = json.dumps(feedback_api.stub.cards[delivery.card_id].card, ensure_ascii=False)
    assert "zzq-comment-marker" not in card
    assert "x_injected" not in json.dumps(Revision.objects.values()[0], default=str)
    area = stub_area(feedback_api, delivery)
    assert area[feedback_cards.DETAIL]["content"] == "已补充说明，谢谢"
    assert area[feedback_cards.STATUS]["content"] == "已选择：**结论有误** · 原因：不完整"
    assert "zzq-comment-marker" not in caplog.text
    assert "ou_requester" not in caplog.text


@pytest.mark.parametrize(
    ("form_value", "zh"),
    [
        ({"fb_reason": "not_in_snapshot"}, "请选择列表中的原因"),
        ({"fb_reason": ["wrong_facts"]}, "请选择列表中的原因"),
        ({"fb_comment": "x" * 51}, "补充说明太长：最多 50 个字"),
        ({"fb_comment": {"text": "x"}}, "补充说明必须是文字"),
        ({"fb_comment": "   "}, "请选择原因或填写补充说明"),
        ({}, "请选择原因或填写补充说明"),
    ],
)
def test_invalid_details_get_a_toast_and_nothing_is_written(delivery, click, form_value, zh):
    click(delivery, "incorrect")
    status, answer = click.detail(delivery, current_rev(delivery), form_value)
    assert status == 200
    assert answer["toast"]["type"] == "warning"
    assert answer["toast"]["i18n"]["zh_cn"] == zh
    assert Revision.objects.count() == 1


def test_required_comment_is_enforced(feedback_api, click):
    feedback_api.bot.policy = {
        "enabled": True,
        "negative_followup": {"comment": {"required": True, "max_length": 5}},
    }
    feedback_api.bot.save()
    delivery = Delivery.objects.get(delivery_id=feedback_api.deliver().json()["delivery_id"])
    click(delivery, "incorrect")
    _, answer = click.detail(delivery, current_rev(delivery), {"fb_comment": "  "})
    assert answer["toast"]["i18n"]["zh_cn"] == "请填写补充说明后再提交"
    _, answer = click.detail(delivery, current_rev(delivery), {"fb_comment": " 12345 "})
    assert answer["toast"]["type"] == "success"
    assert Revision.objects.order_by("-revision").first().comment == "12345"


def test_details_need_a_negative_choice_and_the_current_rev(delivery, click):
    click(delivery, "conclusive_usable")
    _, answer = click.detail(delivery, current_rev(delivery), {"fb_reason": "incomplete"})
    assert answer["toast"]["i18n"]["zh_cn"] == "请先选择负面评价再补充说明"
    click(delivery, "incorrect", rev=current_rev(delivery))
    _, answer = click.detail(delivery, "fb_old", {"fb_reason": "incomplete"})
    assert answer["toast"]["i18n"]["zh_cn"] == "卡片已过期并已刷新，请重新选择"
    assert Revision.objects.count() == 2


def test_on_an_everyone_card_another_persons_click_leaves_an_open_detail_form_usable(
    feedback_api, click
):
    """ou_a opens the negative form; ou_b rates meanwhile: ou_a's form still submits (the
    form belongs to ou_a's own latest revision), while ou_a's own older form state is stale."""
    feedback_api.bot.policy = {**FULL_POLICY, "audience": "everyone"}
    feedback_api.bot.save()
    delivery = Delivery.objects.get(delivery_id=feedback_api.deliver().json()["delivery_id"])
    click(delivery, "incorrect", operator="ou_a")
    form_rev = current_rev(delivery)  # the rev ou_a's open form carries
    _, answer = click(delivery, "conclusive_usable", rev=form_rev, operator="ou_b")
    assert answer["toast"]["type"] == "success"
    assert current_rev(delivery) != form_rev

    _, answer = click.detail(delivery, form_rev, {"fb_reason": "incomplete"}, operator="ou_a")
    assert answer["toast"]["type"] == "success"
    detailed = Revision.objects.get(operator_open_id="ou_a", revision=2)
    assert (detailed.reason_key, detailed.semantic) == ("incomplete", "negative")

    # ou_a's form made before their own latest revision is still stale
    _, answer = click.detail(delivery, form_rev, {"fb_reason": "wrong_facts"}, operator="ou_a")
    assert answer["toast"]["i18n"]["zh_cn"] == "卡片已过期并已刷新，请重新选择"
    assert Revision.objects.filter(operator_open_id="ou_a").count() == 2


def test_unchanged_details_write_nothing(delivery, click):
    click(delivery, "incorrect")
    rev = current_rev(delivery)
    click.detail(delivery, rev, {"fb_reason": "incomplete"})
    _, answer = click.detail(delivery, current_rev(delivery), {"fb_reason": "incomplete"})
    assert answer["toast"]["i18n"]["zh_cn"] == "没有变化"
    assert Revision.objects.count() == 2


def test_value_sent_as_a_json_string_in_action_value_is_handled(delivery, click):
    """A value sent as a JSON string is read (the SDK's typed model would raise)."""
    body = click.payload(delivery, "conclusive_usable")
    body["event"]["action"]["value"] = json.dumps(body["event"]["action"]["value"])
    assert click.post(body)[1]["toast"]["type"] == "success"
    assert Revision.objects.count() == 1


def test_click_on_the_value_rendered_in_the_sent_card_round_trips(feedback_api, delivery, click):
    """The button's behaviors value, taken from the card Cardloop sent, is a valid click."""
    (create,) = feedback_api.stub.calls_to("POST", "/open-apis/cardkit/v1/cards")
    area = {e.get("element_id"): e for e in create.field_json("data")["body"]["elements"]}
    value = button_values(area)["effective_progress"]["behaviors"][0]["value"]
    body = click.payload(delivery, "x")
    body["event"]["action"]["value"] = value
    assert click.post(body)[1]["toast"]["type"] == "success"
    assert Revision.objects.get().verdict_key == "effective_progress"


def _sha1_headers(raw: bytes) -> dict[str, str]:
    ts, nonce = str(int(time.time())), "n-42"
    sha1 = hashlib.sha1((ts + nonce + feishu.VERIFICATION_TOKEN).encode() + raw).hexdigest()
    return {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": sha1}


@pytest.mark.parametrize("attack", ["sha1_token", "upper_case", "undecryptable", "wrong_key"])
def test_forged_or_undecryptable_feedback_clicks_write_nothing(
    delivery, click, client, lark_bot, attack
):
    """Undecryptable or badly signed clicks: no revision, no event, no card update, JSON 4xx."""
    body = click.payload(delivery, "conclusive_usable")
    if attack == "sha1_token":
        raw = json.dumps(body).encode()
        response = feishu.post_callback(
            client,
            lark_bot.app_id,
            b"",
            sealed=(raw, {"Content-Type": "application/json", **_sha1_headers(raw)}),
        )
    elif attack == "upper_case":
        raw, headers = seal(body, encrypt_key=feishu.ENCRYPT_KEY)
        headers["X-Lark-Signature"] = headers["X-Lark-Signature"].upper()
        response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(raw, headers))
    elif attack == "undecryptable":
        raw, headers = seal(
            {"encrypt": "%%not-base64%%"}, encrypt_key=feishu.ENCRYPT_KEY, encrypt_body=False
        )
        response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(raw, headers))
    else:
        raw, headers = seal(body, encrypt_key="another-key")
        response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(raw, headers))
    assert response.status_code in (400, 401)
    assert response["Content-Type"] == "application/json"
    assert "error" in json.loads(response.content)
    assert not Revision.objects.exists()
    assert not Event.objects.filter(type="feedback.revised").exists()
    assert not CardUpdate.objects.exists()
    assert not InboundEvent.objects.exists()


def test_concurrent_repeats_of_one_event_write_one_revision(lark_bot, delivery):
    """(b) The same event_id twice within milliseconds from two threads: one revision."""
    from django.test import Client

    sealed = seal(
        feishu.payload(
            "card_action_feedback_click",
            {
                "event.action.value.delivery": delivery.delivery_id,
                "event.action.value.rev": "",
                "event.context.open_message_id": delivery.platform_message_id,
            },
        ),
        encrypt_key=feishu.ENCRYPT_KEY,
    )
    answers = _concurrently(
        4, lambda: feishu.post_callback(Client(), lark_bot.app_id, b"", sealed=sealed)
    )
    assert [r.status_code for r in answers] == [200] * 4
    assert all(json.loads(r.content)["toast"]["type"] in {"success", "info"} for r in answers)
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1


def _concurrently(n, fn):
    barrier = threading.Barrier(n)
    results = []
    lock = threading.Lock()

    def run():
        barrier.wait()
        try:
            result = fn()
            with lock:
                results.append(result)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == n
    return results


@pytest.mark.postgres
def test_concurrent_duplicate_clicks_write_one_revision_and_one_event_on_postgresql(
    lark_bot, delivery
):
    """Double clicks with distinct event_ids on real PostgreSQL connections: one revision, one
    event, one outbox-ready fact; every loser gets the winner's answer."""
    from django.test import Client

    def post():
        body = feishu.payload(
            "card_action_feedback_click",
            {
                "event.action.value.delivery": delivery.delivery_id,
                "event.action.value.key": "incorrect",
                "event.action.value.rev": "",
                "event.context.open_message_id": delivery.platform_message_id,
            },
        )
        return feishu.post_callback(Client(), lark_bot.app_id, body)

    answers = _concurrently(8, post)
    toasts = [json.loads(r.content)["toast"] for r in answers]
    assert [r.status_code for r in answers] == [200] * 8
    assert {t["i18n"]["zh_cn"] for t in toasts} == {"已记录，可在下方补充原因"}
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    assert LatestFeedback.objects.count() == 1
    assert InboundEvent.objects.count() == 8


@pytest.mark.postgres
def test_concurrent_different_choices_on_one_card_state_write_one_revision_on_postgresql(
    lark_bot, delivery
):
    """Two different buttons clicked on the same card state at once: the first wins, the
    other is stale (toast + repaint), never two revisions at one chain position."""
    from django.test import Client

    keys = iter(["conclusive_usable", "incorrect", "effective_progress", "incorrect"])  # as below
    lock = threading.Lock()

    def post():
        with lock:
            key = next(keys)
        body = feishu.payload(
            "card_action_feedback_click",
            {
                "event.action.value.delivery": delivery.delivery_id,
                "event.action.value.key": key,
                "event.action.value.rev": "",
                "event.context.open_message_id": delivery.platform_message_id,
            },
        )
        return feishu.post_callback(Client(), lark_bot.app_id, body)

    answers = _concurrently(4, post)
    assert [r.status_code for r in answers] == [200] * 4
    # the losers read the delivery after waiting for its row lock: they must see the winner's
    # revision as current (stale), not fail on a half-read row (PostgreSQL's re-check of a
    # locked row does not re-join it: select_related columns came back NULL)
    toast_types = sorted(json.loads(r.content)["toast"]["type"] for r in answers)
    assert "error" not in toast_types, toast_types
    assert Revision.objects.count() == 1
    # the winner and its duplicate (same key on the same state) are "recorded", the rest stale
    sent = ["conclusive_usable", "incorrect", "effective_progress", "incorrect"]
    winner = Revision.objects.get().verdict_key
    assert toast_types.count("success") == sent.count(winner), toast_types
    assert toast_types.count("warning") == 4 - sent.count(winner), toast_types
    assert Event.objects.filter(type="feedback.revised").count() == 1


@pytest.mark.asyncio
async def test_click_through_the_asgi_application_is_answered_then_the_card_updates(
    feedback_api, delivery
):
    from asgiref.sync import sync_to_async

    status, headers, answer = await feishu.apost_callback(
        feedback_api.bot.app_id,
        feishu.payload(
            "card_action_feedback_click",
            {
                "event.action.value.delivery": delivery.delivery_id,
                "event.context.open_message_id": delivery.platform_message_id,
            },
        ),
    )
    assert status == 200 and headers["content-type"] == "application/json"
    assert answer["toast"]["type"] == "success"

    def after():
        assert RELEASES.flush()  # the process's release batch after the answer
        row = CardUpdate.objects.get()
        assert row.hold_token == ""  # released once the answer was sent
        return drain_card_updates()

    try:
        assert await sync_to_async(after)() == 1
    finally:
        await sync_to_async(connections.close_all)()  # the async ORM's thread keeps its session
    assert feedback_api.stub.cards[delivery.card_id].sequences == [1]


def test_a_failing_renderer_keeps_the_click_and_answers_a_plain_toast(
    delivery, click, monkeypatch, caplog
):
    """A renderer that raises: state right, answer toast-only (never a card Feishu could
    refuse), traceback logged, no broken card update queued."""

    def broken(*args, **kwargs):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(feedback_cards, "feedback_area", broken)
    status, answer = click(delivery, "conclusive_usable")
    assert status == 200
    assert set(answer) == {"toast"} and answer["toast"]["type"] == "success"
    assert Revision.objects.count() == 1
    assert Event.objects.filter(type="feedback.revised").count() == 1
    assert not CardUpdate.objects.exists()
    assert "rendering the feedback area failed" in caplog.text
    assert "RuntimeError: renderer bug" in caplog.text
