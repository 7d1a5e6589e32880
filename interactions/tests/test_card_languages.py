"""Interaction cards (approvals, quick replies, forms, commands), progress cards with their
asks, and alert cards carry Cardloop's text in Chinese and English (Card JSON 2.0
`i18n_content`), valid in every state, with the bot's `card_language` as content; read here as
a Feishu client in each locale shows them (`tests.feishu.read_text`), without a browser."""

from __future__ import annotations

import datetime as dt

import pytest

from analytics.alerts import service as alerts
from analytics.models import Alert, AlertRule
from botadmin.models import Bot
from interactions.models import Interaction, ProgressSession
from interactions.render import interaction_cards, progress_cards
from interactions.tests.ia_helpers import FORM_FIELDS, QUICK_ACTIONS, build
from interactions.tests.test_progress_render import ask, session
from tests.feishu import assert_bilingual_card, read_text

LANGUAGES = ("zh-hans", "en")


def _interaction(kind, status):
    extra = {"kind": kind}
    if kind == "quick_reply":
        extra["actions"] = QUICK_ACTIONS
    if kind == "form":
        extra["fields"] = FORM_FIELDS
        extra["actions"] = []
    if kind == "command":
        extra["actions"] = []
    ia = build(**extra)
    if status != "pending":
        ia.status = status
        ia.resolution = {"via": "card", "at": "2026-01-01T00:00:00+00:00", "value": "approve"}
        ia.resolution.update(action_id="approve", operator="ou_requester")
    return ia


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize(
    ("kind", "status"),
    [(k, s) for k in Interaction.Kind.values for s in Interaction.Status.values if k != "ask"],
)
def test_every_interaction_card_state_is_valid_in_both_languages(kind, status, language):
    card = interaction_cards.feishu_card(_interaction(kind, status), language)
    assert_bilingual_card(card)
    zh, en = read_text(card, "zh_cn"), read_text(card, "en_us")
    assert len(zh) == len(en) and zh != en
    assert card["header"]["title"]["content"] == "Run a shell command?"  # the caller's text
    default = zh if language == "zh-hans" else en
    assert card["header"]["subtitle"]["content"] in default


def test_a_pending_approval_reads_in_each_readers_language():
    card = interaction_cards.feishu_card(_interaction("approval", "pending"), "zh-hans")
    zh, en = read_text(card, "zh_cn"), read_text(card, "en_us")
    assert "需要审批" in zh and "Approval needed" in en
    assert "Approve" in en and "Deny" in en and "Always allow" in en
    assert "Approve" not in zh


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("status", [s for s, _label in ProgressSession.Status.choices])
def test_every_progress_card_state_with_asks_is_valid_in_both_languages(status, language):
    card = progress_cards.render(session(status=status), [ask(0), ask(1)], language)
    assert_bilingual_card(card)
    zh, en = read_text(card, "zh_cn"), read_text(card, "en_us")
    assert len(zh) == len(en) and zh != en


def test_a_progress_form_reads_in_each_readers_language():
    card = progress_cards.render(session(), [ask()], "en")
    (placeholder, *_rest) = [c["placeholder"] for c in _components(card) if c.get("tag") == "input"]
    assert placeholder["content"] == "Other (optional)"  # the bot's language is English
    assert placeholder["i18n_content"] == {"zh_cn": "其他（可选）", "en_us": "Other (optional)"}
    assert "Cancel task" in read_text(card, "en_us")
    assert "Cancel task" not in read_text(card, "zh_cn")


def _components(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _components(value)
    elif isinstance(node, list):
        for item in node:
            yield from _components(item)


@pytest.mark.django_db
@pytest.mark.parametrize("language", LANGUAGES)
def test_an_alert_card_reads_in_each_readers_language(language):
    bot = Bot.objects.create(app_id="cli_alerts", name="alerts", card_language=language)
    rule = AlertRule(
        name="Positive rate",
        kind=AlertRule.Kind.POSITIVE_RATE_BELOW,
        threshold=50,
        window_minutes=60,
        notify_bot=bot,
    )
    start = dt.datetime(2026, 3, 10, 3, tzinfo=dt.UTC)
    alert = Alert(
        rule=rule,
        value=31.25,
        threshold=50,
        sample=32,
        window_start=start,
        window_end=start + dt.timedelta(hours=1),
        fired_at=start + dt.timedelta(hours=1),
    )
    card = alerts.render_card(alert)
    assert_bilingual_card(card)
    zh, en = " ".join(read_text(card, "zh_cn")), " ".join(read_text(card, "en_us"))
    assert "all deliveries" in en and "all deliveries" not in zh
    assert "31.2%" in zh and "31.2%" in en
    title = card["header"]["title"]
    assert title["content"] == title["i18n_content"]["zh_cn" if language == "zh-hans" else "en_us"]


@pytest.mark.parametrize(
    ("code", "language"),
    [
        ("zh-CN", "zh-hans"),  # Slack's users.info locale
        ("zh-hans", "zh-hans"),  # Telegram's language_code
        ("ZH-tw", "zh-hans"),
        ("en-US", "en"),
        ("ja-JP", "en"),
        ("", ""),
        (None, ""),
        (7, ""),
    ],
)
def test_a_readers_chat_language_code_picks_chinese_or_english_and_nothing_for_none(code, language):
    from interactions.channels.slack import ingress as slack_ingress
    from interactions.channels.telegram import handlers as telegram_handlers
    from interactions.render.bilingual import reader_language

    assert reader_language(code) == language
    assert slack_ingress.reader_language(code) == language  # the same rule, "" when unknown
    # Telegram answers in English when the client sends no language_code
    assert telegram_handlers.reader_language({"language_code": code}) == (language or "en")
    assert telegram_handlers.reader_language(None) == "en"


def _objects(tree):
    """Every dict and list of `tree`, by identity."""
    found = [tree] if isinstance(tree, dict | list) else []
    children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, list) else ()
    for child in children:
        found += _objects(child)
    return found


def test_merged_locales_add_i18n_where_text_differs_and_share_nothing_with_the_renders():
    from interactions.lark.cardjson import merge_locales

    def render(status, button, extra):
        return {
            "elements": [
                {"tag": "markdown", "element_id": "s", "content": status},
                {"tag": "button", "text": {"tag": "plain_text", "content": button}},
                {"tag": "markdown", "content": "same", "i18n_content": {"zh_cn": "x"}},
                {"tag": "column_set", "columns": extra},
            ]
        }

    zh = render("已记录", "有用", [{"a": 1}])
    en = render("Recorded", "Helpful", [{"a": 1}, {"b": 2}])  # a part whose shape differs
    zh_before, en_before = repr(zh), repr(en)
    merged = merge_locales({"zh_cn": zh, "en_us": en}, "zh_cn")
    status, button, same, columns = merged["elements"]
    assert status == {
        "tag": "markdown",
        "element_id": "s",
        "content": "已记录",
        "i18n_content": {"zh_cn": "已记录", "en_us": "Recorded"},
    }
    assert button["text"]["i18n_content"] == {"zh_cn": "有用", "en_us": "Helpful"}
    assert same == {"tag": "markdown", "content": "same", "i18n_content": {"zh_cn": "x"}}
    assert columns["columns"] == [{"a": 1}]  # left in the default language
    assert (repr(zh), repr(en)) == (zh_before, en_before)  # the renders are not changed
    inputs = {id(o) for o in _objects(zh) + _objects(en)}
    assert not inputs & {id(o) for o in _objects(merged)}  # a change to one cannot reach the other
