"""Resolving interactions: every path (card click, typed text, API, timeout, cancel) wins
when first and every later path is told it lost and what won; one `interaction.resolved`
event per interaction; refusals (operator, chat, unknown id or action, expiry) write nothing;
"always" rules and their scopes; the sweeper; the final card reaches Feishu with no buttons."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone, translation
from rest_framework.test import APIClient

from interactions.approvals import handlers as approval_handlers
from interactions.approvals import service as approvals
from interactions.approvals import textcommands
from interactions.callbacks import registry
from interactions.cardqueue import worker as cardworker
from interactions.lifecycle import resolve as lifecycle
from interactions.models import ApprovalRule, CardUpdate, Interaction
from interactions.tests.ia_helpers import *  # noqa: F403
from interactions.tests.ia_helpers import CHAT, OTHER, REQUESTER
from plumbing.workqueue import WorkStatus
from tests import feishu


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


@pytest.fixture
def api(lark_bot, make_api_key):
    raw, _key = make_api_key(lark_bot)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def sent(lark_stub, lark_bot, make_interaction):
    """`sent(kind="approval", **fields)`: an interaction created and sent to the stub."""

    def make(kind="approval", **fields):
        return approvals.send_to_chat(make_interaction(lark_bot, kind, **fields))

    return make


def events_of(ia):
    Event = apps.get_model("feedback", "Event")
    return list(Event.objects.filter(event_id=lifecycle.stable_event_id(ia.public_id)))


def click(bot, ia, action_value="approve", *, operator=REQUESTER, chat=CHAT, form=None):
    changes = {
        "event.action.value.interaction_id": ia.public_id,
        "event.action.value.action_id": action_value,
        "event.action.value.action_value": action_value,
        "event.operator.open_id": operator,
        "event.context.open_chat_id": chat,
        "event.context.open_message_id": ia.open_message_id or "om_final_card",
    }
    if form is not None:
        changes["event.action.form_value"] = form
    action = registry.CardAction.from_payload(bot, feishu.payload("card_action_approval", changes))
    return approval_handlers.on_card_action(action)


def type_command(bot, ia, value="approve", *, operator=REQUESTER, chat=CHAT):
    return textcommands.handle(
        bot, f"/_interaction {ia.public_id} {value}", open_id=operator, chat_id=chat
    )


def reload(ia):
    return Interaction.objects.get(pk=ia.pk)


# ---------------------------------------------------------------------------------------------
# Each path, first: it wins
# ---------------------------------------------------------------------------------------------


def test_card_click_by_the_requester_approves_with_one_event_and_the_final_card(lark_bot, sent):
    ia = sent()
    answer = click(lark_bot, ia, "approve")
    assert answer.toast.type == "success" and answer.toast.en_us == "Approved."
    ia = reload(ia)
    assert ia.status == "resolved"
    assert {k: ia.resolution[k] for k in ("action_id", "value", "operator", "via")} == {
        "action_id": "approve",
        "value": "approve",
        "operator": REQUESTER,
        "via": "card",
    }
    assert "Approved" in str(answer.card) and "behaviors" not in str(answer.card)
    (event,) = events_of(ia)
    assert event.type == "interaction.resolved"
    assert '"via":"card"' in event.body and ia.body not in event.body


def test_typed_command_in_the_chat_denies(lark_bot, sent):
    ia = sent()
    reply = type_command(lark_bot, ia, "deny")
    assert (reply.ok, reply.code, str(reply.text)) == (True, "resolved", "Denied.")
    assert reload(ia).resolution["via"] == "text"
    assert reload(ia).resolution["action_id"] == "deny"


def test_typed_option_number_picks_that_option(lark_bot, sent):
    ia = sent("quick_reply")
    reply = type_command(lark_bot, ia, "3")
    assert reply.ok
    assert reload(ia).resolution["value"] == "later"


def test_api_resolve_answers_a_quick_reply_and_its_value_reaches_the_event(lark_bot, sent, api):
    ia = sent("quick_reply")
    response = api.post(
        f"/api/v1/interactions/{ia.public_id}/resolve", {"value": "yes"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["won"] is True
    assert response.json()["interaction"]["resolution"]["via"] == "api"
    (event,) = events_of(ia)
    assert '"value":"yes"' in event.body


def test_cancel_through_the_api(lark_bot, sent, api):
    ia = sent()
    response = api.post(f"/api/v1/interactions/{ia.public_id}/cancel")
    assert response.status_code == 200
    ia = reload(ia)
    assert (ia.status, ia.resolution["via"]) == ("cancelled", "cancel")
    assert len(events_of(ia)) == 1


def test_timeout_through_the_sweeper_denies_an_approval(lark_bot, sent):
    ia = sent()
    assert lifecycle.expire_due(now=ia.expires_at - timedelta(seconds=1)) == 0
    assert lifecycle.expire_due(now=ia.expires_at + timedelta(seconds=1)) == 1
    ia = reload(ia)
    assert ia.status == "expired"
    assert (ia.resolution["via"], ia.resolution["action_id"], ia.resolution["value"]) == (
        "timeout",
        "deny",
        "deny",
    )
    assert len(events_of(ia)) == 1
    assert lifecycle.expire_due(now=ia.expires_at + timedelta(seconds=2)) == 0


# ---------------------------------------------------------------------------------------------
# First wins, the rest are told they lost and what won
# ---------------------------------------------------------------------------------------------


def _win(path, bot, ia, api):
    if path == "card":
        assert click(bot, ia, "approve").toast.type == "success"
    elif path == "text":
        assert type_command(bot, ia, "approve").ok
    elif path == "api":
        assert (
            api.post(
                f"/api/v1/interactions/{ia.public_id}/resolve", {"value": "approve"}, format="json"
            ).status_code
            == 200
        )
    elif path == "timeout":
        assert lifecycle.expire_due(now=ia.expires_at + timedelta(seconds=1)) == 1
    elif path == "cancel":
        assert api.post(f"/api/v1/interactions/{ia.public_id}/cancel").status_code == 200


def _lose(path, bot, ia, api) -> dict:
    """Try `path` on a final interaction; returns the resolution the loser was shown."""
    if path == "card":
        answer = click(bot, ia, "deny")
        assert answer.toast.type == "info"
        assert answer.toast.en_us in (
            "This request was already handled.",
            "This request has expired.",
        )
        assert answer.card is not None and "behaviors" not in str(answer.card)
        return reload(ia).resolution
    if path == "text":
        reply = type_command(bot, ia, "deny")
        assert not reply.ok and reply.code in ("already_final", "expired")
        return reply.interaction.resolution
    if path == "api":
        response = api.post(
            f"/api/v1/interactions/{ia.public_id}/resolve", {"value": "deny"}, format="json"
        )
        assert response.status_code == 409 and response.json()["error"] == "already_final"
        return response.json()["detail"]["interaction"]["resolution"]
    if path == "timeout":
        outcome = lifecycle.expire(reload(ia))
        assert not outcome.won
        return outcome.interaction.resolution
    if path == "cancel":
        response = api.post(f"/api/v1/interactions/{ia.public_id}/cancel")
        assert response.status_code == 409
        return response.json()["detail"]["interaction"]["resolution"]
    raise AssertionError(path)


PATHS = ["card", "text", "api", "timeout", "cancel"]
WINNER_VIA = {
    "card": "card",
    "text": "text",
    "api": "api",
    "timeout": "timeout",
    "cancel": "cancel",
}


@pytest.mark.parametrize("winner", PATHS)
def test_first_path_wins_and_every_other_path_is_told_what_won(winner, lark_bot, sent, api):
    ia = sent()
    _win(winner, lark_bot, ia, api)
    won = reload(ia)
    for loser in PATHS:
        if loser == winner:
            continue
        shown = _lose(loser, lark_bot, ia, api)
        assert shown["via"] == WINNER_VIA[winner]
    assert reload(ia).resolution == won.resolution and reload(ia).status == won.status
    assert len(events_of(ia)) == 1


# ---------------------------------------------------------------------------------------------
# Refusals write nothing
# ---------------------------------------------------------------------------------------------


def _nothing_written(ia):
    ia = reload(ia)
    assert ia.status == "pending" and ia.resolution is None
    assert events_of(ia) == []


def test_non_requester_gets_toast_and_nothing_is_written(lark_bot, sent):
    ia = sent()
    answer = click(lark_bot, ia, "approve", operator=OTHER)
    assert answer.toast.type == "warning" and "Only the person" in answer.toast.en_us
    assert answer.card is None
    _nothing_written(ia)


def test_click_from_another_chat_is_refused(lark_bot, sent):
    ia = sent()
    answer = click(lark_bot, ia, "approve", chat="oc_elsewhere")
    assert answer.toast.en_us == "This request belongs to another chat."
    _nothing_written(ia)


def test_unknown_interaction_id_gets_a_toast(lark_bot, sent):
    ia = sent()
    ghost = Interaction(public_id="ia_doesnotexist00", open_message_id="om_x")
    answer = click(lark_bot, ghost, "approve")
    assert answer.toast.en_us == "This request was not found."
    _nothing_written(ia)


def test_unknown_action_value_never_becomes_a_denial(lark_bot, sent):
    ia = sent()
    answer = click(lark_bot, ia, "obliterate")
    assert answer.toast.type == "warning"
    assert answer.toast.en_us == "That option is not available for this request."
    _nothing_written(ia)
    assert not type_command(lark_bot, ia, "nope").ok
    _nothing_written(ia)


def test_click_after_expiry_before_the_sweeper_ran_gets_expired_toast_and_no_write(lark_bot, sent):
    ia = sent()
    Interaction.objects.filter(pk=ia.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = click(lark_bot, ia, "approve")
    assert answer.toast.en_us == "This request has expired."
    with translation.override("zh-hans"):
        pass
    _nothing_written(ia)


def test_toasts_carry_chinese_and_english(lark_bot, sent):
    ia = sent()
    click(lark_bot, ia, "approve")
    answer = click(lark_bot, ia, "approve")
    assert (answer.toast.zh_cn, answer.toast.en_us) == (
        "已处理",
        "This request was already handled.",
    )
    other = sent()
    Interaction.objects.filter(pk=other.pk).update(expires_at=timezone.now())
    answer = click(lark_bot, other, "approve")
    assert (answer.toast.zh_cn, answer.toast.en_us) == ("已过期", "This request has expired.")


def test_allow_list_replaces_the_requester(lark_bot, sent):
    ia = sent(allowed_open_ids=[OTHER, "ou_third"])
    assert click(lark_bot, ia, "approve", operator=REQUESTER).toast.type == "warning"
    _nothing_written(ia)
    assert click(lark_bot, ia, "approve", operator="ou_third").toast.type == "success"


def test_form_submit_from_the_card_stores_the_known_fields_only(lark_bot, sent):
    ia = sent("form")
    answer = click(
        lark_bot,
        ia,
        "submit",
        form={"f_env": "prod", "f_note": "  ship it ", "x_injected": "1"},
    )
    assert answer.toast.type == "success"
    assert reload(ia).resolution["value"] == {"env": "prod", "note": "ship it"}


@pytest.mark.parametrize(
    "form",
    [{"f_note": "no env"}, {"f_env": "moon"}, {"f_env": "", "f_note": ""}],
)
def test_invalid_form_submit_gets_a_toast_and_stays_pending(lark_bot, sent, form):
    ia = sent("form")
    answer = click(lark_bot, ia, "submit", form=form)
    assert answer.toast.type == "warning"
    _nothing_written(ia)


def test_typed_form_answer(lark_bot, sent):
    ia = sent("form")
    reply = type_command(lark_bot, ia, "env=staging; note=ok")
    assert reply.ok
    assert reload(ia).resolution["value"] == {"env": "staging", "note": "ok"}


def test_command_interaction_takes_free_text(lark_bot, sent):
    ia = sent("command")
    reply = type_command(lark_bot, ia, "deploy to staging please")
    assert reply.ok
    assert reload(ia).resolution["value"] == "deploy to staging please"


# ---------------------------------------------------------------------------------------------
# Text commands: every refusal
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "operator", "chat", "code"),
    [
        ("/_interaction {id} approve", OTHER, CHAT, "not_allowed"),
        ("/_interaction {id} approve", REQUESTER, "oc_other_chat", "wrong_chat"),
        ("/_interaction ia_ffffffffffffffff approve", REQUESTER, CHAT, "unknown_interaction"),
        ("/_interaction", REQUESTER, CHAT, "malformed"),
        ("/_interaction {id}", REQUESTER, CHAT, "malformed"),
        ("/_interaction {id} maybe", REQUESTER, CHAT, "unknown_action"),
        ("/_interaction {id} 9", REQUESTER, CHAT, "unknown_action"),
        # digits to str.isdigit() that int() refuses, and more digits than int() reads
        ("/_interaction {id} ²", REQUESTER, CHAT, "unknown_action"),
        ("/_interaction {id} " + "1" * 5000, REQUESTER, CHAT, "unknown_action"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else v,
)
def test_text_command_refusals_write_nothing(lark_bot, sent, text, operator, chat, code):
    ia = sent()
    reply = textcommands.handle(
        lark_bot, text.format(id=ia.public_id), open_id=operator, chat_id=chat
    )
    assert (reply.handled, reply.ok, reply.code) == (True, False, code)
    assert str(reply.text)
    _nothing_written(ia)


def test_text_command_after_expiry_is_refused(lark_bot, sent):
    ia = sent()
    Interaction.objects.filter(pk=ia.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    reply = type_command(lark_bot, ia)
    assert (reply.ok, reply.code) == (False, "expired")
    _nothing_written(ia)


def test_other_bots_interactions_are_unknown(lark_bot, sent, make_bot):
    ia = sent()
    other_bot = make_bot(app_id="cli_other")
    reply = type_command(other_bot, ia)
    assert reply.code == "unknown_interaction"
    _nothing_written(ia)


def test_text_that_is_not_a_command_is_not_handled(lark_bot):
    for text in ("hello", "/_interactionX ia_1 approve", "please /_interaction ia_1 approve"):
        reply = textcommands.handle(lark_bot, text, open_id=REQUESTER, chat_id=CHAT)
        assert (reply.handled, reply.code) == (False, "not_a_command")


def test_mention_before_the_command_is_ignored(lark_bot, sent):
    ia = sent()
    reply = textcommands.handle(
        lark_bot, f"@_user_1 /_interaction {ia.public_id} approve", open_id=REQUESTER, chat_id=CHAT
    )
    assert reply.ok


# ---------------------------------------------------------------------------------------------
# "Always" rules
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "covered", "not_covered"),
    [
        (
            "session",
            {"session_id": "sess_1", "chat_id": "oc_x"},
            {"session_id": "sess_2", "chat_id": CHAT},
        ),
        (
            "chat",
            {"session_id": "sess_9", "chat_id": CHAT},
            {"session_id": "sess_1", "chat_id": "oc_x"},
        ),
        ("bot", {"session_id": "any", "chat_id": "oc_any"}, None),
    ],
)
def test_always_records_a_rule_scoped_to_what_the_request_named(
    lark_bot, sent, api, scope, covered, not_covered
):
    ia = sent(always_scope=scope)
    answer = click(lark_bot, ia, "always")
    assert answer.toast.type == "success" and scope in answer.toast.en_us
    rule = ApprovalRule.objects.get()
    assert (rule.tool, rule.scope, rule.interaction_id) == ("bash", scope, ia.pk)
    response = api.get("/api/v1/approvals/check", {"tool": "bash", **covered})
    assert response.status_code == 200
    assert response.json()["allowed"] is True and response.json()["rule"]["scope"] == scope
    assert api.get("/api/v1/approvals/check", {"tool": "git", **covered}).json()["allowed"] is False
    if not_covered:
        assert api.get("/api/v1/approvals/check", {"tool": "bash", **not_covered}).json() == {
            "allowed": False,
            "rule": None,
        }
    (event,) = events_of(ia)
    assert f'"rule":{{"tool":"bash","scope":"{scope}"' in event.body


def test_session_scope_is_the_default_and_chat_without_a_session(lark_bot, make_interaction):
    assert make_interaction(lark_bot).always_scope == "session"
    assert make_interaction(lark_bot, session_id="").always_scope == "chat"


def test_revoked_rule_no_longer_allows_and_a_new_always_records_a_new_rule(lark_bot, sent, api):
    click(lark_bot, sent(), "always")
    rule = ApprovalRule.objects.get()
    assert approvals.revoke_rule(rule) is True
    assert approvals.revoke_rule(rule) is False
    check = {"tool": "bash", "session_id": "sess_1"}
    assert api.get("/api/v1/approvals/check", check).json()["allowed"] is False
    click(lark_bot, sent(), "always")
    assert ApprovalRule.objects.active().count() == 1
    assert api.get("/api/v1/approvals/check", check).json()["allowed"] is True


def test_second_always_in_the_same_scope_reuses_the_rule(lark_bot, sent):
    click(lark_bot, sent(), "always")
    click(lark_bot, sent(), "always")
    assert ApprovalRule.objects.count() == 1


def test_approve_and_deny_record_no_rule(lark_bot, sent):
    click(lark_bot, sent(), "approve")
    click(lark_bot, sent(), "deny")
    assert ApprovalRule.objects.count() == 0


# ---------------------------------------------------------------------------------------------
# The card on Feishu after the answer: the final state, nothing left to click
# ---------------------------------------------------------------------------------------------


def _run_queue():
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(next_attempt_at=timezone.now())
    from interactions.models import CardEntity

    CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
    return cardworker.run_due(10)


def _has_buttons(card) -> bool:
    return '"tag": "button"' in __import__("json").dumps(card)


@pytest.mark.parametrize("path", ["card", "text", "timeout", "cancel"])
def test_final_card_replaces_the_buttons_through_cardkit_never_a_message_put(
    path, lark_bot, lark_stub, sent, api
):
    ia = sent()
    stub_card = lark_stub.cards[reload(ia).card.card_id]
    assert _has_buttons(stub_card.card)
    _win(path, lark_bot, ia, api)
    assert _run_queue() == 1
    assert not _has_buttons(stub_card.card)
    assert stub_card.card["config"]["update_multi"] is True
    assert stub_card.sequences == [1]
    assert lark_stub.calls_to("PUT", "/open-apis/im/v1/messages") == []


def test_a_late_pending_rendering_never_brings_the_buttons_back(lark_bot, lark_stub, sent):
    from interactions.cardqueue import service as cards
    from interactions.render import interaction_cards

    ia = sent()
    pending_card = interaction_cards.feishu_card(ia)
    click(lark_bot, ia, "approve")
    entity = reload(ia).card
    assert cards.enqueue_card(entity, pending_card, version=lifecycle.PENDING_VERSION) is None
    _run_queue()
    assert not _has_buttons(lark_stub.cards[entity.card_id].card)


def test_resolution_racing_the_send_still_updates_the_card(lark_bot, lark_stub, make_interaction):
    ia = make_interaction(lark_bot)
    lifecycle.cancel(ia)  # resolved before its card was recorded
    entity = __import__("interactions.cardqueue.service", fromlist=["x"]).send_card(
        lark_bot,
        __import__("interactions.render.interaction_cards", fromlist=["x"]).feishu_card(ia),
        receive_id=CHAT,
    )
    approvals.attach_card(ia, entity)
    _run_queue()
    assert not _has_buttons(lark_stub.cards[entity.card_id].card)


def test_event_belongs_to_the_team_the_chat_is_bound_to(lark_bot, sent):
    from botadmin.models import Chat, Team, TeamChat

    team = Team.objects.create(name="Ops")
    TeamChat.objects.create(team=team, chat=Chat.objects.create(chat_id=CHAT))
    ia = sent()
    click(lark_bot, ia, "approve")
    (event,) = events_of(ia)
    assert event.team_id == team.pk and event.bot_id == lark_bot.pk
