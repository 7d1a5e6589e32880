"""The Telegram feedback keyboard (`feedback.telegram_cards`), pure: every state keeps
Telegram's limits as the loopback stub checks them independently (callback_data 1-64 bytes,
button text, keyboard size), buttons carry short codes (never JSON, never the delivery id), the
stale-click rev round-trips, and the states follow `feedback.cards.area_state`."""

from __future__ import annotations

import pytest

from botadmin.policy import default_policy
from feedback import telegram_cards as tc
from feedback.cards import Choice
from interactions.channels.telegram import render
from tests.telegram_stub import TelegramStub

REV = "fb_" + "a" * 32


def policy(**changes):
    p = default_policy()
    p.update({"enabled": True, "audience_open_ids": ["4242"], "allow_reselect": True, **changes})
    return p


BIG = policy(
    buttons=[
        {"key": "k" * 64, "label": "好" * 60, "semantic": "positive"},
        {"key": "b", "label": "🙂" * 40, "semantic": "progress"},
        {"key": "c", "label": "错" * 24, "semantic": "negative"},
        {"key": "d", "label": "跑题", "semantic": "negative"},
    ],
    negative_followup={
        "reasons": [{"key": f"r{i}" + "x" * 60, "label": "原" * 80} for i in range(6)],
        "comment": {"enabled": True, "required": False, "placeholder": "说" * 100},
    },
)
STATES = [
    None,
    Choice(REV, "k" * 64, "positive"),
    Choice(REV, "c", "negative"),
    Choice(REV, "c", "negative", reason_key="r5" + "x" * 60, has_comment=True),
]


@pytest.mark.parametrize("choice", STATES)
def test_every_state_keeps_telegrams_limits_as_the_stub_checks_them(choice):
    markup = tc.keyboard(BIG, "del_" + "0" * 32, choice)
    assert TelegramStub().keyboard_problem(markup) is None
    assert render.limit_problems(render.TelegramMessage("x", markup)) == []
    for button in (b for row in markup["inline_keyboard"] for b in row):
        data = button["callback_data"]
        assert 1 <= len(data.encode("utf-8")) <= 64
        assert "{" not in data and "del_" not in data
        assert tc.parse_callback_data(data) is not None
        assert render.tg_len(button["text"]) <= render.MAX_BUTTON_TEXT


def test_callback_data_is_refused_over_64_bytes_and_accepted_at_64():
    at_edge = tc.callback_data(tc.COMMENT, "a" * 61)
    assert len(at_edge.encode()) == 64
    with pytest.raises(render.LimitError):
        tc.callback_data(tc.COMMENT, "a" * 62)
    assert tc.parse_callback_data("fc:" + "a" * 62) is None
    assert (
        TelegramStub().keyboard_problem(
            {"inline_keyboard": [[{"text": "x", "callback_data": "fc:" + "a" * 62}]]}
        )
        == "BUTTON_DATA_INVALID"
    )


def test_the_rev_round_trips_through_the_short_code():
    assert tc.parse_callback_data(tc.callback_data(tc.VERDICT, 2, tc.rev_code(REV))) == (
        tc.VERDICT,
        2,
        REV,
    )
    assert tc.parse_callback_data(tc.callback_data(tc.REASON, 5, tc.rev_code(""))) == (
        tc.REASON,
        5,
        "",
    )
    assert tc.parse_callback_data("fs") == (tc.STATUS, -1, "")
    for bad in ("fv", "fv:x:-", "fv:1", "fr:123:-", "fc:a-b", "zz:1:-", "", None, 7):
        assert tc.parse_callback_data(bad) is None


def _texts(markup):
    return [[b["text"] for b in row] for row in markup["inline_keyboard"]]


def test_a_negative_choice_opens_the_reasons_keyboard_and_details_close_it():
    p = policy(
        negative_followup={
            "reasons": [{"key": "wrong", "label": "事实错误"}, {"key": "short", "label": "不完整"}],
            "comment": {"enabled": True},
        }
    )
    first = tc.keyboard(p, "del_1", None)
    assert _texts(first) == [["结论可用", "有效推进", "结论有误"]]
    assert [b["callback_data"] for b in first["inline_keyboard"][0]] == [
        "fv:0:-",
        "fv:1:-",
        "fv:2:-",
    ]
    negative = tc.keyboard(p, "del_1", Choice(REV, "incorrect", "negative"))
    assert _texts(negative) == [
        ["结论可用", "有效推进", "✓ 结论有误"],
        ["事实错误"],
        ["不完整"],
        ["💬 补充说明"],
    ]
    assert negative["inline_keyboard"][2][0]["callback_data"] == "fr:1:" + "a" * 32
    assert negative["inline_keyboard"][3][0]["callback_data"] == "fc:" + "a" * 32
    done = tc.keyboard(p, "del_1", Choice(REV, "incorrect", "negative", reason_key="short"))
    assert _texts(done)[-1] == ["✓ 已选择：结论有误 · 原因：不完整 · 已记录原因"]


def test_a_final_choice_leaves_only_the_status_button():
    p = policy(allow_reselect=False)
    markup = tc.keyboard(p, "del_1", Choice(REV, "conclusive_usable", "positive"))
    assert markup == {"inline_keyboard": [[{"text": "✓ 已选择：结论可用", "callback_data": "fs"}]]}


def test_labels_follow_the_snapshots_card_language():
    markup = tc.keyboard(policy(card_language="en"), "del_1", None)
    assert _texts(markup) == [["Usable conclusion", "Real progress", "Incorrect"]]
