"""Cardloop's card text in every reader's language: render a card once per card language and
merge the results into one Card JSON 2.0 object with component-level multilingual fields
(`i18n_content`), as Feishu documents in "Configure multilingual cards"
(https://open.feishu.cn/document/feishu-cards/configure-multi-language-content). Each Feishu
client shows the text of its own language; `content` holds the bot's `card_language`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.utils import translation

from interactions.lark.cardjson import merge_locales

T = TypeVar("T")

#: Django language → Feishu card locale, for every language Cardloop's card text is written in.
CARD_LOCALE_OF: dict[str, str] = {"zh-hans": "zh_cn", "en": "en_us"}
DEFAULT_CARD_LANGUAGE = "zh-hans"


def card_locale(language: str) -> str:
    """The Feishu locale key of a Django language code (`zh_cn` for an unknown one)."""
    return CARD_LOCALE_OF.get(language, CARD_LOCALE_OF[DEFAULT_CARD_LANGUAGE])


def bilingual(render: Callable[[], T], language: str = DEFAULT_CARD_LANGUAGE) -> T:
    """`render()` called once under each language of `CARD_LOCALE_OF` (gettext and the labels
    that follow the active language), merged by `cardjson.merge_locales` with `language`'s text
    as `content`. `render` must be pure (same shape in every language). Returns what `render`
    returns (a card or a `{element_id: component}` map)."""
    renders: dict[str, Any] = {}
    for lang, locale in CARD_LOCALE_OF.items():
        with translation.override(lang):
            renders[locale] = render()
    return merge_locales(renders, card_locale(language))


def reader_language(code: Any) -> str:
    """The Django language Cardloop answers a person in, from the language code their chat
    client reports: a Slack user's `locale` ("zh-CN", "en-US";
    https://api.slack.com/methods/users.info) or a Telegram user's `language_code` (an IETF
    tag, "zh-hans", "en"; https://core.telegram.org/bots/api#user). Any Chinese code (zh…)
    → "zh-hans", any other code → "en", "" when there is none (empty or not a string: the
    caller picks its fallback)."""
    if not isinstance(code, str) or not code:
        return ""
    return "zh-hans" if code.lower().startswith("zh") else "en"


def bot_language(bot: Any) -> str:
    """A bot's `card_language` (the default for None or a bot without one)."""
    language = getattr(bot, "card_language", "") or DEFAULT_CARD_LANGUAGE
    return language if language in CARD_LOCALE_OF else DEFAULT_CARD_LANGUAGE


def language_of(obj: Any) -> str:
    """The `card_language` of the bot an interaction, session or alert belongs to: its loaded
    `bot` when there is one, else one small query by `bot_id`, else the default (an unsaved
    object without a bot)."""
    cache = getattr(getattr(obj, "_state", None), "fields_cache", {})
    if cache.get("bot") is not None:
        return bot_language(cache["bot"])
    bot_id = getattr(obj, "bot_id", None)
    if bot_id is None:
        return DEFAULT_CARD_LANGUAGE
    from botadmin.models import Bot

    language = Bot.objects.filter(pk=bot_id).values_list("card_language", flat=True).first()
    return language if language in CARD_LOCALE_OF else DEFAULT_CARD_LANGUAGE
