"""Feedback options the agent proposes per answer (`feedback_options` on POST
/api/v1/deliveries): used only as the effective policy's `agent_options` allows, frozen in the
delivery's snapshot, and a click's semantic comes from that snapshot; a key only another
delivery proposed is refused. Through the real parts: the API, the lark-oapi client against the
stub, signed + encrypted callbacks through the ingress."""

from __future__ import annotations

import pytest

from feedback import cards as feedback_cards
from feedback.models import Delivery, Revision
from feedback.tests.conftest import FULL_POLICY
from tests.feishu import assert_bilingual_card, read_text

pytestmark = pytest.mark.django_db(transaction=True)

PROPOSAL = {
    "buttons": [
        {"key": "plan_ok", "label": "方案可行", "label_en": "Plan works", "semantic": "positive"},
        {"key": "plan_partial", "label": "部分可行", "semantic": "progress"},
        {
            "key": "plan_wrong",
            "label": "方案不对",
            "label_en": "Wrong plan",
            "semantic": "negative",
        },
    ],
    "reasons": [{"key": "too_risky", "label": "风险太大", "label_en": "Too risky"}],
}


def _set_agent_options(feedback_api, value):
    feedback_api.bot.policy = {**FULL_POLICY, "agent_options": value}
    feedback_api.bot.save()


def _deliver(feedback_api, **fields):
    response = feedback_api.deliver(**fields)
    assert response.status_code == 201, response.json()
    body = response.json()
    return body, Delivery.objects.get(delivery_id=body["delivery_id"])


def _sent_buttons(feedback_api, delivery):
    card = feedback_api.stub.cards[delivery.card_id].card
    assert_bilingual_card(card)
    area = {e["element_id"]: e for e in card["body"]["elements"] if e.get("element_id")}
    return [c["elements"][0] for c in area[feedback_cards.BUTTONS]["columns"]], card


def test_agent_options_off_ignores_the_proposal_and_says_why(feedback_api):
    body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)  # off by default
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "none",
        "agent_options_off",
    )
    buttons, _card = _sent_buttons(feedback_api, delivery)
    assert [b["name"] for b in buttons] == [
        "fb_conclusive_usable",
        "fb_effective_progress",
        "fb_incorrect",
    ]
    assert [r["key"] for r in delivery.policy_snapshot["negative_followup"]["reasons"]] == [
        "wrong_facts",
        "incomplete",
    ]


def test_agent_options_buttons_uses_the_buttons_and_keeps_the_configured_reasons(feedback_api):
    _set_agent_options(feedback_api, "buttons")
    body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "buttons",
        "reasons_not_allowed",
    )
    buttons, card = _sent_buttons(feedback_api, delivery)
    assert [b["name"] for b in buttons] == ["fb_plan_ok", "fb_plan_partial", "fb_plan_wrong"]
    assert [b["type"] for b in buttons] == ["primary", "default", "default"]
    assert {"方案可行", "部分可行", "方案不对"} <= set(read_text(card, "zh_cn"))
    assert {"Plan works", "部分可行", "Wrong plan"} <= set(read_text(card, "en_us"))
    snapshot = delivery.policy_snapshot
    assert [b["key"] for b in snapshot["buttons"]] == ["plan_ok", "plan_partial", "plan_wrong"]
    assert [r["key"] for r in snapshot["negative_followup"]["reasons"]] == [
        "wrong_facts",
        "incomplete",
    ]


def test_agent_options_buttons_and_reasons_uses_both(feedback_api):
    _set_agent_options(feedback_api, "buttons_and_reasons")
    body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "buttons_and_reasons",
        "",
    )
    assert delivery.policy_snapshot["negative_followup"]["reasons"] == PROPOSAL["reasons"]
    # a retry answers the same outcome from the frozen snapshot
    again = feedback_api.post(
        "/api/v1/deliveries",
        {
            "chat_id": "oc_group_chat",
            "requester_open_id": "ou_requester",
            "response_kind": "final",
            "session_id": delivery.session_id,
            "turn_id": delivery.turn_id,
            "card": {"schema": "2.0", "body": {"elements": []}},
        },
        format="json",
    )
    assert again.status_code == 200
    assert again.json()["feedback_options_used"] == "buttons_and_reasons"


def test_without_a_proposal_nothing_is_ignored(feedback_api):
    _set_agent_options(feedback_api, "buttons_and_reasons")
    body, delivery = _deliver(feedback_api)
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == ("none", "")
    assert delivery.policy_snapshot["buttons"][0]["key"] == "conclusive_usable"


def test_a_proposal_on_an_answer_without_feedback_is_ignored(feedback_api):
    _set_agent_options(feedback_api, "buttons")
    body, _delivery = _deliver(feedback_api, feedback_options=PROPOSAL, response_kind="progress")
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "none",
        "feedback_not_shown",
    )


def test_buttons_that_break_the_policy_are_ignored_not_sent(feedback_api):
    feedback_api.bot.policy = {
        **FULL_POLICY,
        "agent_options": "buttons",
        "visible_semantics": ["positive", "negative"],
        "buttons": [
            {"key": "good", "label": "好", "semantic": "positive"},
            {"key": "bad", "label": "差", "semantic": "negative"},
        ],
    }
    feedback_api.bot.save()
    body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)  # uses hidden progress
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "none",
        "not_consistent",
    )
    assert [b["key"] for b in delivery.policy_snapshot["buttons"]] == ["good", "bad"]


def _paths(detail, prefix=""):
    """Dotted paths of an error detail: DRF's nested `{"buttons": {"0": {"label": [...]}}}`
    and the policy's `["buttons[1].key: duplicate key plan_ok"]` alike."""
    if isinstance(detail, dict):
        out = set()
        for key, value in detail.items():
            if key.isdigit():
                out |= _paths(value, f"{prefix}[{key}]")
            else:
                out |= _paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    out = {prefix}
    for message in detail:
        head = str(message).split(": ", 1)[0]
        if ": " in str(message) and " " not in head:
            out.add(f"{prefix}.{head}" if prefix else head)
    return out


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"buttons": PROPOSAL["buttons"][:1]}, "buttons"),
        ({"buttons": PROPOSAL["buttons"] * 2}, "buttons"),
        ({"buttons": [PROPOSAL["buttons"][0]] * 2}, "buttons[1].key"),
        (
            {"buttons": [{**PROPOSAL["buttons"][0], "label": "长" * 25}, PROPOSAL["buttons"][2]]},
            "buttons[0].label",
        ),
        (
            {"buttons": [{**PROPOSAL["buttons"][0], "label_en": "x" * 25}, PROPOSAL["buttons"][2]]},
            "buttons[0].label_en",
        ),
        (
            {"buttons": [{**PROPOSAL["buttons"][0], "semantic": "meh"}, PROPOSAL["buttons"][2]]},
            "buttons[0].semantic",
        ),
        ({"buttons": PROPOSAL["buttons"], "reasons": PROPOSAL["reasons"] * 7}, "reasons"),
        (
            {"buttons": PROPOSAL["buttons"][:2], "reasons": PROPOSAL["reasons"]},
            "reasons",
        ),
        (
            {"buttons": PROPOSAL["buttons"], "reasons": [{"key": "r", "label": "\u200b"}]},
            "reasons[0].label",
        ),
    ],
)
def test_a_proposal_outside_the_policy_limits_is_refused_naming_the_field(
    feedback_api, options, field
):
    _set_agent_options(feedback_api, "buttons_and_reasons")
    response = feedback_api.deliver(feedback_options=options)
    assert response.status_code == 400, response.json()
    detail = response.json()["detail"]["feedback_options"]
    assert field in _paths(detail), detail
    assert not Delivery.objects.exists()


def test_a_click_on_a_proposed_key_records_the_snapshots_semantic(feedback_api, click):
    _set_agent_options(feedback_api, "buttons_and_reasons")
    _body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)
    status, answer = click(delivery, "plan_wrong")
    assert status == 200
    assert answer["toast"]["i18n"] == {
        "zh_cn": "已记录，可在下方补充原因",
        "en_us": "Recorded. You can add a reason below.",
    }
    revision = Revision.objects.get(delivery=delivery)
    assert (revision.verdict_key, revision.semantic) == ("plan_wrong", "negative")
    status, answer = click(delivery, "plan_partial", rev=revision.revision_id)
    assert answer["toast"]["i18n"]["en_us"] == "Recorded: 部分可行"  # no English form given
    latest = Revision.objects.filter(delivery=delivery).order_by("-revision").first()
    assert (latest.verdict_key, latest.semantic) == ("plan_partial", "progress")


def test_an_english_toast_shows_the_english_form_of_a_proposed_label(feedback_api, click):
    _set_agent_options(feedback_api, "buttons")
    _body, delivery = _deliver(feedback_api, feedback_options=PROPOSAL)
    status, answer = click(delivery, "plan_ok")
    assert answer["toast"]["i18n"] == {"zh_cn": "已记录：方案可行", "en_us": "Recorded: Plan works"}


def test_a_key_only_another_delivery_proposed_is_refused(feedback_api, click):
    _set_agent_options(feedback_api, "buttons")
    _body, proposed = _deliver(feedback_api, feedback_options=PROPOSAL)
    _body, plain = _deliver(feedback_api)
    status, answer = click(plain, "plan_ok")
    assert status == 200
    assert answer["toast"]["i18n"]["zh_cn"] == "该选项已失效"
    assert not Revision.objects.filter(delivery=plain).exists()
    # and a configured key the proposal replaced is refused on the proposing delivery
    status, answer = click(proposed, "conclusive_usable")
    assert answer["toast"]["i18n"]["zh_cn"] == "该选项已失效"
    assert not Revision.objects.exists()


def _readme_example():
    """The request and the card of README.md's example of proposed options."""
    import json
    import re
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("README.md").read_text(encoding="utf-8")
    section = text[text.index("## Cards in each reader's language") :]
    body = re.search(r"-d '(\{.*?\})'\n", section, re.S).group(1)
    card = re.search(r"```json\n(.*?)\n```", section, re.S).group(1)
    return json.loads(body), card


def test_the_readme_example_sends_the_card_the_readme_shows(feedback_api):
    import json

    request, card_text = _readme_example()
    feedback_api.bot.policy = {"enabled": True, "agent_options": "buttons_and_reasons"}
    feedback_api.bot.save()
    request["chat_id"] = "oc_group_chat"
    response = feedback_api.post("/api/v1/deliveries", request, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["feedback_options_used"], body["feedback_options_ignored"]) == (
        "buttons_and_reasons",
        "",
    )
    sent = feedback_api.stub.cards[body["card_id"]].card
    assert sent == json.loads(card_text.replace("del_…", body["delivery_id"]))
