"""The Telegram renderers are pure and keep Telegram's limits (text ≤ 4096 characters,
callback_data 1-64 bytes, keyboard size): approvals, quick replies, forms, asks with single
and multi select, the "other" prompt, and final states without a keyboard.

Limits: https://core.telegram.org/bots/api#sendmessage,
https://core.telegram.org/bots/api#inlinekeyboardbutton."""

from __future__ import annotations

import pytest
from django.utils import translation

from interactions.channels.telegram import render
from interactions.channels.telegram.render import Selection, TelegramMessage
from interactions.models import Interaction
from interactions.tests.ia_helpers import FORM_FIELDS, QUICK_ACTIONS, build
from tests.telegram_stub import TelegramStub

S = Interaction.Status
QUESTIONS = [
    {
        "question": "Which database?",
        "header": "DB",
        "options": [{"label": "PostgreSQL", "description": "server"}, {"label": "SQLite"}],
        "multiSelect": False,
    },
    {
        "question": "Which features?",
        "header": "Features",
        "options": [{"label": "Auth"}, {"label": "Search"}, {"label": "Export"}],
        "multiSelect": True,
    },
]


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


def buttons(message: TelegramMessage) -> list[dict]:
    rows = (message.reply_markup or {}).get("inline_keyboard") or []
    return [b for row in rows for b in row]


def stub_accepts(message: TelegramMessage) -> bool:
    """The loopback stub's own, independent check of the same limits."""
    stub = TelegramStub()
    return (
        stub._text_problem(message.text) is None
        and stub.keyboard_problem(message.reply_markup) is None
    )


def test_a_pending_approval_has_approve_and_deny_on_a_row_and_always_below():
    message = render.render_interaction(build(channel="telegram"))
    rows = message.reply_markup["inline_keyboard"]
    assert [[b["text"] for b in row] for row in rows] == [["Approve", "Deny"], ["Always allow"]]
    assert [b["callback_data"] for b in buttons(message)] == [
        "ia:ia_0123456789abcdef:0",
        "ia:ia_0123456789abcdef:1",
        "ia:ia_0123456789abcdef:2",
    ]
    assert "denied" in message.text and "/_interaction ia_0123456789abcdef approve" in message.text
    assert stub_accepts(message)


def test_buttons_carry_a_short_id_never_json():
    for b in buttons(render.render_interaction(build(kind="quick_reply", actions=QUICK_ACTIONS))):
        assert "{" not in b["callback_data"]
        assert render.parse_callback_data(b["callback_data"])[0] == render.INTERACTION


@pytest.mark.parametrize(
    ("status", "resolution", "line"),
    [
        (S.RESOLVED, {"action_id": "approve", "value": "approve", "operator": "42"}, "Approved"),
        (S.RESOLVED, {"action_id": "deny", "value": "deny", "operator": "42"}, "Denied"),
        (S.EXPIRED, None, "Expired without an answer: denied."),
        (S.CANCELLED, None, "Cancelled."),
    ],
)
def test_a_final_approval_shows_its_state_and_no_keyboard(status, resolution, line):
    message = render.render_interaction(build(status=status, resolution=resolution))
    assert message.reply_markup is None
    assert line in message.text and "**" not in message.text


def test_quick_replies_get_one_button_per_action_and_forms_the_typed_command():
    quick = render.render_interaction(build(kind="quick_reply", actions=QUICK_ACTIONS))
    assert [b["text"] for b in buttons(quick)] == ["Yes please", "No", "Later"]
    form = render.render_interaction(build(kind="form", actions=[], fields=FORM_FIELDS))
    assert form.reply_markup is None
    assert "/_interaction ia_0123456789abcdef env=…; note=…" in form.text
    assert "There are no buttons" not in form.text


def test_a_long_question_is_shortened_to_4096_characters_keeping_the_state_line():
    message = render.render_interaction(build(body="x" * 10_000, status=S.CANCELLED))
    assert render.tg_len(message.text) == render.MAX_TEXT  # the emoji of the line counts 2
    assert message.text.endswith("Cancelled.")
    pending = render.render_interaction(build(body="ü" * 5000))
    assert len(pending.text) <= render.MAX_TEXT and stub_accepts(pending)


def test_callback_data_of_exactly_64_bytes_is_accepted_and_65_refused():
    assert render.callback_data("ia", "a" * 59, 1) == "ia:" + "a" * 59 + ":1"  # 64 bytes
    with pytest.raises(render.LimitError, match="65 bytes"):
        render.callback_data("ia", "a" * 60, 1)
    # multibyte: "é" is 2 bytes, so 29 of them + "ia:" + ":1" is 63 bytes; 30 are 65
    assert len(render.callback_data("ia", "é" * 29 + "a", 1).encode()) == 64
    with pytest.raises(render.LimitError):
        render.callback_data("ia", "é" * 30, 1)
    assert render.parse_callback_data("ia:" + "a" * 59 + ":1") == ("ia", "a" * 59, (1,))
    assert render.parse_callback_data("ia:" + "a" * 60 + ":1") is None


def test_the_checker_and_the_stub_agree_at_the_64_byte_edge():
    for data, fine in (
        ("x" * 64, True),
        ("é" * 32, True),
        ("x" * 65, False),
        ("é" * 32 + "x", False),
        ("", False),
    ):
        message = TelegramMessage(
            "hi", {"inline_keyboard": [[{"text": "b", "callback_data": data}]]}
        )
        assert (render.limit_problems(message) == []) is fine
        assert stub_accepts(message) is fine


def test_the_checker_names_oversized_text_and_keyboards():
    many = {"inline_keyboard": [[{"text": "b", "callback_data": "ia:x:1"}] for _ in range(101)]}
    problems = render.limit_problems(TelegramMessage("y" * 4097, many))
    assert any("4096" in p for p in problems) and any("101 buttons" in p for p in problems)
    wide = {"inline_keyboard": [[{"text": "b", "callback_data": "ia:x:1"}] * 9]}
    assert render.limit_problems(TelegramMessage("ok", wide)) == [
        "a row has no button or more than 8"
    ]


@pytest.mark.parametrize(
    "data",
    ["ia:ia_x", "ia:ia_x:a", "zz:ia_x:1", "as:ia_x:1", "aq:ia_x:1", "ia::1", None, 5, "ia:ia_x:１"],
)
def test_callback_data_that_is_not_cardloops_is_not_parsed(data):
    assert render.parse_callback_data(data) is None


def ask(**overrides) -> Interaction:
    values = {
        "kind": "ask",
        "public_id": "ask_0123456789abcdef",
        "actions": [],
        "questions": QUESTIONS,
    }
    return build(**{**values, **overrides})


def test_an_ask_has_a_button_per_option_an_other_button_per_question_and_submit():
    message = render.render_ask(ask())
    texts = [b["text"] for b in buttons(message)]
    assert texts == [
        "PostgreSQL",
        "SQLite",
        "Other…",
        "Auth",
        "Search",
        "Export",
        "Other…",
        "Submit",
    ]
    assert buttons(message)[0]["callback_data"] == "aq:ask_0123456789abcdef:0:0"
    assert buttons(message)[-1]["callback_data"] == "as:ask_0123456789abcdef"
    assert "[DB] Which database?" in message.text and stub_accepts(message)


def test_one_single_select_question_is_answered_by_its_tap_without_submit():
    message = render.render_ask(ask(questions=QUESTIONS[:1]))
    assert "Submit" not in [b["text"] for b in buttons(message)]
    assert not render.needs_submit(ask(questions=QUESTIONS[:1]))


def test_multi_select_taps_toggle_and_single_select_taps_replace():
    a = ask()
    sel = render.toggle(a, Selection(), 1, 0)
    sel = render.toggle(a, sel, 1, 2)
    sel = render.toggle(a, sel, 1, 0)
    assert sel.picked[1] == (2,)
    sel = render.toggle(a, Selection(picked={0: (1,)}, other={0: "MySQL"}), 0, 0)
    assert sel.picked[0] == (0,) and 0 not in sel.other
    marked = [b["text"] for b in buttons(render.render_ask(a, Selection(picked={1: (0, 2)})))]
    assert "✓ Auth" in marked and "✓ Export" in marked and "Search" in marked
    with pytest.raises(IndexError):
        render.toggle(a, Selection(), 1, 3)


def test_answers_follow_the_selection_in_the_shape_submit_answers_takes():
    a = ask()
    sel = Selection(picked={0: (0,), 1: (0, 2)}, other={1: "CSV too"})
    assert render.answers(a, sel) == [
        {"question": "Which database?", "selectedLabels": ["PostgreSQL"], "customInput": ""},
        {
            "question": "Which features?",
            "selectedLabels": ["Auth", "Export"],
            "customInput": "CSV too",
        },
    ]


def test_a_withdrawn_or_answered_ask_loses_its_keyboard():
    assert render.render_ask(ask(status=S.CANCELLED)).reply_markup is None
    assert "Withdrawn" in render.render_ask(ask(status=S.CANCELLED)).text
    assert render.render_ask(ask(status=S.RESOLVED)).reply_markup is None


def test_the_other_prompt_is_a_force_reply_naming_the_question():
    prompt = render.other_prompt(ask(), 1)
    assert prompt.reply_markup["force_reply"] is True and "Which features?" in prompt.text


def test_renderers_speak_zh_hans():
    with translation.override("zh-hans"):
        message = render.render_interaction(build())
        asked = render.render_ask(ask())
    assert [b["text"] for b in buttons(message)][:2] == ["批准", "拒绝"]
    assert "提交" in [b["text"] for b in buttons(asked)]
