"""`POST /api/v1/deliveries` and `manage.py send_card`: the real lark-oapi client against the
loopback Feishu stub; policy resolution, the frozen snapshot, retries, failures, two-phase
registration, destinations and turn.completed."""

from __future__ import annotations

import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from botadmin import services
from botadmin.models import Chat, Team
from feedback import cards as feedback_cards
from feedback.models import Delivery, Event
from feedback.tests.conftest import answer_card
from interactions.models import CardEntity

pytestmark = pytest.mark.django_db(transaction=True)


def test_final_answer_is_sent_as_a_cardkit_entity_with_the_feedback_area(feedback_api):
    response = feedback_api.deliver(
        session_id="s-1", turn_id="t-1", model="gpt-x", skill_name="search", skill_version="2"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["feedback_shown"] is True and body["feedback_reason"] == "enabled"
    assert body["status"] == "sent" and body["created"] is True
    stub = feedback_api.stub
    (create,) = stub.calls_to("POST", "/open-apis/cardkit/v1/cards")
    sent_card = create.field_json("data")
    assert sent_card["config"]["update_multi"] is True
    assert [e.get("element_id") for e in sent_card["body"]["elements"]] == [
        "answer",
        *feedback_cards.AREA_IDS,
    ]
    (send,) = stub.calls_to("POST", "/open-apis/im/v1/messages")
    assert send.query["receive_id_type"] == "chat_id"
    assert send.body["receive_id"] == "oc_group_chat"
    assert send.body["uuid"] == body["delivery_id"]
    card_id = sent_card and stub.messages[body["platform_message_id"]]["card_id"]
    assert send.field_json("content") == {"type": "card", "data": {"card_id": card_id}}

    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert delivery.card_id == card_id == body["card_id"]
    assert delivery.content_hash == feedback_cards.content_hash(answer_card())
    assert (delivery.model, delivery.skill_name, delivery.skill_version) == ("gpt-x", "search", "2")
    assert delivery.requester_open_id == "ou_requester"
    assert delivery.policy_snapshot["audience_open_ids"] == ["ou_requester"]
    assert delivery.policy_snapshot["allow_reselect"] is True
    assert CardEntity.objects.get(card_id=card_id).purpose == "feedback"


def test_retry_with_the_same_correlation_returns_the_same_delivery_and_sends_nothing(
    feedback_api,
):
    first = feedback_api.deliver(session_id="s-r", turn_id="t-r").json()
    calls = len(feedback_api.stub.calls)
    again = feedback_api.deliver(session_id="s-r", turn_id="t-r", card=answer_card("edited"))
    assert again.status_code == 200
    assert again.json() == {**first, "created": False}
    assert len(feedback_api.stub.calls) == calls
    assert Delivery.objects.count() == 1
    other_attempt = feedback_api.deliver(session_id="s-r", turn_id="t-r", dispatch_attempt=1)
    assert other_attempt.status_code == 201
    assert other_attempt.json()["delivery_id"] != first["delivery_id"]


def _race(feedback_api, bodies: list[dict]) -> list:
    """POST each of `bodies` to /api/v1/deliveries at once, one thread and client each (a
    barrier lines them up), with `feedback_api`'s key; returns the responses."""
    from rest_framework.test import APIClient

    auth = feedback_api._credentials["HTTP_AUTHORIZATION"]
    barrier = threading.Barrier(len(bodies))
    responses = []

    def post(body):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=auth)
        barrier.wait()
        try:
            responses.append(client.post("/api/v1/deliveries", body, format="json"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(body,)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return responses


@pytest.mark.postgres
def test_concurrent_first_requests_of_one_correlation_create_one_delivery_and_send_once(
    feedback_api,
):
    responses = _race(
        feedback_api,
        [
            {
                "chat_id": "oc_group_chat",
                "requester_open_id": "ou_requester",
                "response_kind": "final",
                "session_id": "s-race",
                "turn_id": "t-race",
                "card": answer_card(),
            }
        ]
        * 6,
    )
    results = [(r.status_code, r.json()["delivery_id"]) for r in responses]
    assert sorted(s for s, _ in results) == [200] * 5 + [201]
    assert len({d for _, d in results}) == 1
    assert Delivery.objects.count() == 1
    assert len(feedback_api.stub.calls_to("POST", "/open-apis/im/v1/messages")) == 1
    assert len(feedback_api.stub.calls_to("POST", "/open-apis/cardkit/v1/cards")) == 1


@pytest.mark.parametrize("kind", ["progress", None, ""])
def test_progress_or_absent_response_kind_never_gets_feedback(feedback_api, kind):
    response = feedback_api.deliver(response_kind=kind)
    assert response.status_code == 201
    assert response.json()["feedback_shown"] is False
    assert response.json()["feedback_reason"] == "not_final"
    sent = feedback_api.stub.calls_to("POST", "/open-apis/cardkit/v1/cards")[0].field_json("data")
    assert [e.get("element_id") for e in sent["body"]["elements"]] == ["answer"]


def test_api_only_bot_never_gets_feedback(feedback_api):
    feedback_api.bot.api_only = True
    feedback_api.bot.save()
    body = feedback_api.deliver().json()
    assert (body["feedback_shown"], body["feedback_reason"]) == (False, "api_only")


def test_policy_off_and_ambiguous_team_are_returned_as_reasons(feedback_api):
    feedback_api.bot.policy = {}
    feedback_api.bot.save()
    assert feedback_api.deliver().json()["feedback_reason"] == "disabled"
    chat = services.save_chat("t", Chat(chat_id="oc_shared", name="shared"))
    for name in ("A", "B"):
        services.bind_team_chat("t", services.save_team("t", Team(name=name)), chat)
    feedback_api.bot.policy = {"enabled": True}
    feedback_api.bot.save()
    body = feedback_api.deliver(chat_id="oc_shared").json()
    assert (body["feedback_shown"], body["feedback_reason"]) == (False, "ambiguous_team")


def test_snapshot_freezes_the_reviewers_and_the_chat_team(feedback_api):
    team = services.save_team("t", Team(name="Team"))
    chat = services.save_chat("t", Chat(chat_id="oc_team", name="team chat"))
    services.bind_team_chat("t", team, chat)
    services.set_chat_policy(
        "t", feedback_api.bot, chat, {"audience": "reviewers", "reviewers": ["ou_a", "ou_b"]}
    )
    body = feedback_api.deliver(chat_id="oc_team", requester_open_id="").json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert delivery.team == team and delivery.chat == chat
    assert delivery.policy_snapshot["audience_open_ids"] == ["ou_a", "ou_b"]
    services.set_chat_policy("t", feedback_api.bot, chat, {"audience": "everyone"})
    delivery.refresh_from_db()
    assert delivery.policy_snapshot["audience_open_ids"] == ["ou_a", "ou_b"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"chat_id": None}, "chat_id"),
        ({"card": None}, "card"),
        ({"card": {**answer_card(), "schema": "1.0"}}, "card"),
        ({"card": "not an object"}, "card"),
        (
            {
                "card": {
                    "schema": "2.0",
                    "config": {"update_multi": True},
                    "body": {"elements": [{"tag": "action", "actions": []}]},
                }
            },
            "card",
        ),
        (
            {
                "card": {
                    "schema": "2.0",
                    "config": {"update_multi": True},
                    "body": {
                        "elements": [
                            {"tag": "markdown", "content": "x", "element_id": "fb_buttons"}
                        ]
                    },
                }
            },
            "card",
        ),
        ({"card": answer_card("x" * 31_000)}, "card"),
        ({"session_id": "s", "turn_id": ""}, "turn_id"),
        ({"response_kind": "done"}, "response_kind"),
        ({"requester_open_id": "not-an-open-id"}, "requester_open_id"),
        ({"requester_open_id": ""}, "requester_open_id"),
        ({"dispatch_attempt": -1}, "dispatch_attempt"),
        ({"usage": [1, 2]}, "usage"),
        ({"platform_message_id": "om_1"}, "card_id"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written_or_sent(
    feedback_api, changes, field
):
    response = (
        feedback_api.deliver(**changes)
        if "chat_id" not in changes
        else (
            feedback_api.post(
                "/api/v1/deliveries",
                {"card": answer_card(), "response_kind": "final"},
                format="json",
            )
        )
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid"
    assert field in body["detail"], body
    assert not Delivery.objects.exists()
    assert feedback_api.stub.calls_to("POST", "/open-apis/cardkit") == []


def test_without_an_api_key_the_api_answers_401_json(client, transactional_db):
    response = client.post("/api/v1/deliveries", {}, content_type="application/json")
    assert response.status_code in (401, 403)
    assert response.json()["error"] in {"not_authenticated", "forbidden"}


def test_send_failure_is_a_502_the_delivery_is_kept_as_send_failed_and_a_retry_sends_it(
    feedback_api,
):
    stub = feedback_api.stub
    stub.fail("POST", "/open-apis/im/v1/messages", code=230002, msg="bot not in chat", times=1)
    response = feedback_api.deliver(session_id="s-f", turn_id="t-f")
    assert response.status_code == 502
    body = response.json()
    assert body["error"] == "send_failed"
    assert body["detail"]["feishu_code"] == 230002
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.error_code) == ("send_failed", "lark_230002")
    assert body["detail"]["delivery"]["delivery_id"] == delivery.delivery_id

    retry = feedback_api.deliver(session_id="s-f", turn_id="t-f")
    assert retry.status_code == 200, retry.json()
    assert retry.json()["status"] == "sent"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.error_code) == ("sent", "")
    assert delivery.platform_message_id in stub.messages


def test_network_failure_reaching_feishu_is_a_502_not_a_500(feedback_api):
    feedback_api.stub.fail(
        "POST", "/open-apis/cardkit/v1/cards", http_status=502, body=b"<html>bad gateway</html>"
    )
    response = feedback_api.deliver()
    assert response.status_code == 502
    assert response["Content-Type"] == "application/json"
    assert Delivery.objects.get().status == "send_failed"
    assert Delivery.objects.get().error_code.startswith("lark_")


def test_two_phase_registration_registers_the_card_and_writes_the_feedback_area(feedback_api):
    stub = feedback_api.stub
    card_id = stub.add_card(answer_card(), app_id=feedback_api.bot.app_id)
    stub.cards[card_id].sequence = 7
    response = feedback_api.deliver(platform_message_id="om_backend_1", card_id=card_id, sequence=7)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["platform_message_id"], body["card_id"]) == ("om_backend_1", card_id)
    assert body["feedback_shown"] is True
    assert stub.calls_to("POST", "/open-apis/im/v1/messages") == []
    assert stub.cards[card_id].sequences == [8]
    ids = [e.get("element_id") for e in stub.cards[card_id].card["body"]["elements"]]
    assert ids == ["answer", *feedback_cards.AREA_IDS]
    entity = CardEntity.objects.get(card_id=card_id)
    assert (entity.open_message_id, entity.sequence, entity.applied_sequence) == (
        "om_backend_1",
        8,
        8,
    )


def test_one_delivery_per_platform_message_and_a_refused_one_never_touches_the_card(
    feedback_api,
):
    stub = feedback_api.stub
    card_id = stub.add_card(answer_card(), app_id=feedback_api.bot.app_id)
    first = feedback_api.deliver(platform_message_id="om_x", card_id=card_id)
    assert first.status_code == 201
    assert stub.cards[card_id].sequences == [1]
    written = stub.cards[card_id].card
    again = feedback_api.deliver(
        platform_message_id="om_x", card_id=card_id, session_id="s-other", turn_id="t-other"
    )
    assert again.status_code == 400
    assert "platform_message_id" in again.json()["detail"]
    assert Delivery.objects.filter(platform_message_id="om_x").count() == 1
    # the first delivery's card keeps its own feedback area: nothing was written to it
    assert stub.cards[card_id].sequences == [1]
    assert stub.cards[card_id].card == written
    refused = Delivery.objects.get(session_id="s-other")
    assert (refused.status, refused.error_code, refused.platform_message_id) == (
        "send_failed",
        "message_taken",
        "",
    )


@pytest.mark.postgres
def test_concurrent_registrations_of_one_message_by_different_turns_write_its_card_once(
    feedback_api,
):

    stub = feedback_api.stub
    card_id = stub.add_card(answer_card(), app_id=feedback_api.bot.app_id)
    bodies = [
        {
            "chat_id": "oc_group_chat",
            "requester_open_id": "ou_requester",
            "response_kind": "final",
            "session_id": "s-reg",
            "turn_id": f"t-reg-{i}",
            "platform_message_id": "om_shared",
            "card_id": card_id,
            "card": answer_card(),
        }
        for i in range(6)
    ]
    results = [r.status_code for r in _race(feedback_api, bodies)]
    assert sorted(results) == [201] + [400] * 5
    assert stub.cards[card_id].sequences == [1]
    (owner,) = Delivery.objects.filter(platform_message_id="om_shared")
    assert owner.status == "sent"
    assert Delivery.objects.filter(error_code="message_taken").count() == 5


def test_registering_the_message_of_a_card_cardloop_sent_is_refused_before_any_card_update(
    feedback_api,
):
    stub = feedback_api.stub
    sent = feedback_api.deliver(session_id="s-own", turn_id="t-own").json()
    before = list(stub.cards[sent["card_id"]].sequences)
    hijack = feedback_api.deliver(
        session_id="s-2p",
        turn_id="t-2p",
        platform_message_id=sent["platform_message_id"],
        card_id=sent["card_id"],
    )
    assert hijack.status_code == 400
    assert "platform_message_id" in hijack.json()["detail"]
    assert stub.cards[sent["card_id"]].sequences == before
    assert stub.calls_to("PUT", f"/open-apis/cardkit/v1/cards/{sent['card_id']}") == []


def test_destinations_are_frozen_and_a_terminal_that_came_first_completes_the_turn(
    feedback_api, make_destination
):
    destination, _ = make_destination("https://hooks.cardloop.test/x", bots=[feedback_api.bot])
    terminal = feedback_api.post(
        "/api/v1/turns/terminal",
        {"session_id": "s-t", "turn_id": "t-t", "status": "completed", "duration_ms": 1200},
        format="json",
    )
    assert terminal.status_code == 201
    body = feedback_api.deliver(session_id="s-t", turn_id="t-t").json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    assert delivery.webhook_destination_ids == [destination.pk]
    assert delivery.status == "completed" and delivery.duration_ms == 1200
    (event,) = Event.objects.filter(type="turn.completed")
    assert event.delivery == delivery
    assert event.outbox_items.get().destination == destination


def test_proactive_send_without_a_turn_gets_a_fresh_delivery_each_time(feedback_api):
    a = feedback_api.deliver(session_id="", turn_id="").json()
    b = feedback_api.deliver(session_id="", turn_id="").json()
    assert a["delivery_id"] != b["delivery_id"]
    assert Event.objects.filter(type="turn.completed").count() == 0


def test_send_card_command_uses_the_same_service(feedback_api, capsys):
    call_command(
        "send_card",
        "--bot",
        feedback_api.bot.app_id,
        "--chat",
        "oc_group_chat",
        "--response-kind",
        "final",
        "--requester",
        "ou_requester",
        "--text",
        "**hello**",
        "--session",
        "s-cmd",
        "--turn",
        "t-cmd",
    )
    out = capsys.readouterr().out
    delivery = Delivery.objects.get(session_id="s-cmd")
    assert delivery.delivery_id in out and "feedback shown (enabled)" in out
    assert delivery.feedback_shown and delivery.status == "sent"
    call_command(
        "send_card",
        "--bot",
        feedback_api.bot.app_id,
        "--chat",
        "oc_group_chat",
        "--response-kind",
        "progress",
        "--text",
        "working…",
    )
    assert "feedback not shown (not_final)" in capsys.readouterr().out
    with pytest.raises(CommandError, match="requester_open_id"):
        call_command(
            "send_card",
            "--bot",
            feedback_api.bot.app_id,
            "--chat",
            "oc_group_chat",
            "--response-kind",
            "final",
            "--text",
            "x",
        )


def test_a_card_without_update_multi_is_sent_with_it(feedback_api):
    card = answer_card()
    del card["config"]
    response = feedback_api.deliver(card=card)
    assert response.status_code == 201, response.json()
    (create,) = feedback_api.stub.calls_to("POST", "/open-apis/cardkit/v1/cards")
    assert create.field_json("data")["config"] == {"update_multi": True}
    delivery = Delivery.objects.get()
    assert delivery.content_hash == feedback_cards.content_hash(card)  # of the caller's card


def test_a_card_that_only_the_feedback_area_pushes_over_the_size_limit_says_so(feedback_api):
    from interactions.lark.cardjson import MAX_CARD_BYTES, card_bytes

    card = answer_card()
    filler = MAX_CARD_BYTES - len(card_bytes(card)) - 200  # alone: just under the limit
    card["body"]["elements"][0]["content"] += "x" * filler
    response = feedback_api.deliver(card=card)  # the default language: zh-hans
    assert response.status_code == 400
    (problem,) = response.json()["detail"]["card"]
    assert problem.startswith("加上 Cardloop 的反馈区后：$: ")
    assert f"at most {MAX_CARD_BYTES}" in problem
    assert not Delivery.objects.exists()

    en = feedback_api.post(
        "/api/v1/deliveries",
        {
            "chat_id": "oc_group_chat",
            "requester_open_id": "ou_requester",
            "response_kind": "final",
            "session_id": "s-zh",
            "turn_id": "t-zh",
            "card": card,
        },
        format="json",
        HTTP_ACCEPT_LANGUAGE="en",
    )
    assert en.json()["detail"]["card"][0].startswith("With Cardloop's feedback area added: $: ")


def test_a_retried_registration_without_a_card_says_no_feedback_area_was_shown(feedback_api):
    stub = feedback_api.stub
    taken = stub.add_card(answer_card(), app_id=feedback_api.bot.app_id)
    assert feedback_api.deliver(platform_message_id="om_t", card_id=taken).status_code == 201
    refused = feedback_api.deliver(
        session_id="s-2r", turn_id="t-2r", platform_message_id="om_t", card_id=taken
    )
    assert refused.status_code == 400  # message_taken: send_failed, with feedback_shown
    fresh = stub.add_card(answer_card(), app_id=feedback_api.bot.app_id)
    retry = feedback_api.deliver(
        session_id="s-2r", turn_id="t-2r", platform_message_id="om_new", card_id=fresh, card=None
    )
    assert retry.status_code == 200, retry.content
    body = retry.json()
    assert body["status"] == "sent"
    assert (body["feedback_shown"], body["feedback_reason"]) == (False, "no_card")
    assert stub.cards[fresh].sequences == []  # nothing written to the backend's card
