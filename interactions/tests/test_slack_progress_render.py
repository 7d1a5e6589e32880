"""The Slack progress-message renderer (pure, no I/O): every state within Block Kit's limits,
forms only while running, the input blocks named like the Feishu form fields so the Feishu
handlers read a Slack submit unchanged, option values = option indices, the submit's value
the Feishu submit's, and an over-full message shortened and then showing the oldest forms."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from interactions.asks import service as asks
from interactions.channels.slack import blocks
from interactions.channels.slack.channel import form_values
from interactions.channels.slack.progress import LINK_PREFIX, message
from interactions.render import progress_cards
from interactions.tests.ask_helpers import QUESTIONS
from interactions.tests.test_progress_render import ask, session

pytestmark = pytest.mark.django_db


def _inputs(rendered) -> dict[str, dict]:
    return {b["block_id"]: b for b in rendered["blocks"] if b["type"] == "input"}


def _buttons(rendered) -> list[dict]:
    return [e for b in rendered["blocks"] if b["type"] == "actions" for e in b["elements"]]


@pytest.mark.parametrize("status", ["running", "completed", "failed", "cancelled", "recovering"])
def test_every_state_is_within_slacks_limits_and_only_running_shows_forms(status):
    rendered = message(session(status=status), [ask(0), ask(1)], "en")
    assert blocks.problems(rendered) == []
    assert bool(_inputs(rendered)) == (status == "running")
    assert rendered["blocks"][0] == {
        "type": "header",
        "block_id": "progress_title",
        "text": {"type": "plain_text", "text": "Deploying the service", "emoji": True},
    }
    if status == "recovering":
        assert "restarting" in json.dumps(rendered)


def test_input_block_ids_are_the_feishu_field_names_and_option_values_the_indices():
    rendered = message(session(), [ask(0), ask(3)], "en")
    inputs = _inputs(rendered)
    expected = [name for n in (0, 3) for i in (0, 1) for name in progress_cards.field_names(n, i)]
    assert list(inputs) == expected == ["q0", "c0", "q1", "c1", "q0_3", "c0_3", "q1_3", "c1_3"]
    single, multi = inputs["q0"]["element"], inputs["q1"]["element"]
    assert single["type"] == "static_select" and multi["type"] == "multi_static_select"
    assert [o["value"] for o in single["options"]] == ["0", "1"]
    assert [o["text"]["text"] for o in multi["options"]] == ["Unit tests", "Lint", "Migrations"]
    assert inputs["c0"]["element"]["type"] == "plain_text_input"
    assert all(b["optional"] for b in inputs.values())


def test_each_form_has_a_submit_carrying_the_feishu_submit_value():
    first, second = ask(0), ask(1, public_id="ask_00000000000000ff")
    submits = [
        b for b in _buttons(message(session(), [second, first], "en")) if "submit" in b["action_id"]
    ]
    assert [b["action_id"] for b in submits] == ["ask_0_submit", "ask_1_submit"]
    assert [json.loads(b["value"]) for b in submits] == [
        progress_cards.submit_value(first),
        progress_cards.submit_value(second),
    ]
    assert json.loads(submits[0]["value"])["kind"] == "feishu_ask"


def test_a_submits_documented_state_values_answer_through_the_feishu_form_reader():
    """`state.values` as Slack documents it for a block_actions payload
    (https://api.slack.com/reference/interaction-payloads/block-actions): block_id →
    action_id → the element's state."""
    pending = ask(2)
    rendered = message(session(), [pending], "en")
    inputs = _inputs(rendered)

    def state(block_id, value):
        element = inputs[block_id]["element"]
        return {block_id: {element["action_id"]: {"type": element["type"], **value}}}

    values = {
        **state(
            "q0_2", {"selected_option": {"text": {"type": "plain_text", "text": "x"}, "value": "1"}}
        ),
        **state("c0_2", {"value": None}),
        **state("q1_2", {"selected_options": [{"value": "0"}, {"value": "2"}]}),
        **state("c1_2", {"value": "smoke test"}),
    }
    answers = asks.clean_answers(
        pending.questions, asks.answers_from_form(pending, form_values({"values": values}))
    )
    assert answers == [
        {"question": QUESTIONS[0]["question"], "selectedLabels": ["PostgreSQL"], "customInput": ""},
        {
            "question": QUESTIONS[1]["question"],
            "selectedLabels": ["Unit tests", "Migrations"],
            "customInput": "smoke test",
        },
    ]


def test_cancel_has_a_confirm_dialog_until_requested_and_details_links_to_the_url():
    rendered = message(session(details_url="https://agents.example/s/1"), [], "en")
    cancel, details = _buttons(rendered)
    assert cancel["style"] == "danger" and cancel["confirm"]["style"] == "danger"
    assert json.loads(cancel["value"]) == {
        "kind": "progress",
        "act": "cancel",
        "sessionId": session().session_id,
    }
    assert details["url"] == "https://agents.example/s/1" and details["action_id"].startswith(
        LINK_PREFIX
    )
    requested = message(session(cancel_requested_at=timezone.now()), [], "en")
    (details_only,) = _buttons(requested)
    assert json.loads(details_only["value"])["act"] == "details"
    assert "Cancellation requested" in json.dumps(requested)


def test_the_callers_text_cannot_mention_or_link():
    rendered = message(session(summary="<!channel> see <https://x.example|here>"), [], "en")
    summary = next(b for b in rendered["blocks"] if b["block_id"] == "progress_summary")
    assert summary["text"]["text"] == "&lt;!channel&gt; see &lt;https://x.example|here&gt;"


def test_chinese_bots_get_chinese_text():
    rendered = message(session(), [ask(0)], "zh-hans")
    text = json.dumps(rendered, ensure_ascii=False)
    assert "取消任务" in text and "提交" in text and "请选择一项" in text


def _big_questions():
    return [
        {
            "question": "Q" * 1000,
            "header": "H" * 40,
            "options": [{"label": f"{k}" * 60, "description": "d" * 500} for k in range(10)],
            "multiSelect": i % 2 == 1,
        }
        for i in range(4)
    ]


def test_long_texts_are_shortened_to_fit():
    rendered = message(
        session(summary="s" * 4000, tool_lines=["t" * 500] * 20), [ask(0, _big_questions())], "en"
    )
    assert blocks.problems(rendered) == []
    assert len(_inputs(rendered)) == 8


def test_too_many_forms_show_the_oldest_that_fit_and_say_more_wait():
    pending = [ask(n, _big_questions(), public_id=f"ask_{n:016x}") for n in range(5)]
    rendered = message(session(summary="s" * 4000), pending, "en")
    assert blocks.problems(rendered) == []
    assert len(rendered["blocks"]) <= 50
    submits = [b["action_id"] for b in _buttons(rendered) if "submit" in b["action_id"]]
    assert submits == ["ask_0_submit", "ask_1_submit", "ask_2_submit"]
    more = next(b for b in rendered["blocks"] if b["block_id"] == "progress_more")
    assert "2 more question request(s)" in more["elements"][0]["text"]
    assert _buttons(rendered)[-1]["action_id"] == "progress_details"  # the buttons stay
