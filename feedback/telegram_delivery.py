"""Final answers on Telegram: the answer channel of deliveries whose `channel` is `telegram`
(`feedback.answer_channels`), and what taps on their feedback keyboard and replies to a
comment prompt do.

- **Send**: the backend's `text` with the feedback keyboard (`feedback.telegram_cards`) by
  `sendMessage` (https://core.telegram.org/bots/api#sendmessage) through the Telegram channel,
  which records the message as a `CardEntity` (`send_uuid` = the delivery id, `address` =
  `{chat_id, message_id}`); the delivery's `platform_message_id` is `tg:<chat_id>:<message_id>`.
  The text is never stored, only its `content_hash`; without a bot token the channel is a dry
  run.
- **Taps** (`on_tap`, handed to the Telegram channel for the `fv` / `fr` / `fc` / `fs`
  callback_data verbs): the tapped message names the delivery; a verdict or a reason becomes
  `feedback.revisions.record_choice` / `record_details` with the operator from the verified
  update (`callback_query.from.id`), so the audience, the stale-click guard, reselect rules,
  the revision, its event and outbox rows are the ones every channel has. The answer's toast
  is `answerCallbackQuery`'s text in the reader's language.
- **Comments** (`fc`, or a reason when the policy requires a comment): a `force_reply` prompt
  is sent and recorded (`TelegramCommentPrompt`); the prompted person's reply to it
  (`on_reply`) is recorded as the details (`record_details`), and answered with a reply.
- **Repaint**: after a click the keyboard is rendered when the card worker applies the update
  (`RENDERER`, `render_update`) and sent with `editMessageReplyMarkup`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from botadmin.models import TelegramBot
from feedback import answer_channels, revisions, telegram_cards
from feedback import cards as feedback_cards
from feedback.models import Delivery, TelegramCommentPrompt
from interactions import channels
from interactions.callbacks.registry import Answer, CardAction
from interactions.cardqueue import service as cards
from interactions.channels.telegram import handlers, prompts, render
from interactions.models import CardEntity

log = logging.getLogger(__name__)

#: The card-queue renderer of a Telegram answer's keyboard (registered in FeedbackConfig.ready()).
RENDERER = "telegram_feedback"
#: A chat id as Telegram gives it: an integer (groups negative), https://core.telegram.org/bots/api#chat.
CHAT_ID_RE = re.compile(r"^-?[0-9]{1,20}\Z")


class _Lazy:
    """Text rendered when it is shown (so `Toast.of` renders it in each language)."""

    def __init__(self, fn):
        self.fn = fn

    def __str__(self) -> str:
        return self.fn()


def telegram_bot(bot) -> TelegramBot | None:
    """The Telegram bot of `bot`, or None."""
    return TelegramBot.objects.filter(bot=bot).first()


class TelegramAnswers(answer_channels.AnswerChannel):
    """Telegram as an answer channel (module docstring); registered in FeedbackConfig.ready()."""

    kind = Delivery.Channel.TELEGRAM
    requester_field = "requester_user_id"

    def message(self, request) -> Any:
        return request.text or None

    def request_problems(self, bot, request) -> dict[str, list[str]]:
        """The bot must have a Telegram bot (named under `request.channel_field`); `text` is
        required and at most 4096 characters; `chat_id` is Telegram's integer chat id; a Feishu
        `card`, Slack `blocks` and a two-phase registration are refused."""
        problems: dict[str, list[str]] = {}
        if telegram_bot(bot) is None:
            problems[request.channel_field] = [
                _("This bot has no Telegram bot: add one under Telegram bots in the admin first.")
            ]
        for field in ("card", "blocks"):
            if getattr(request, field) is not None:
                problems[field] = [_("A Telegram message takes text only.")]
        if request.registers:
            field = "platform_message_id" if request.platform_message_id else "card_id"
            problems[field] = [_("Registering a message you sent is not available on Telegram.")]
        if not CHAT_ID_RE.match(request.chat_id or ""):
            problems["chat_id"] = [_("Use the Telegram chat id: an integer.")]
        if not request.text:
            problems["text"] = [_("This field is required.")]
        elif render.tg_len(request.text) > render.MAX_TEXT:
            problems["text"] = [_("Telegram allows at most 4096 characters.")]
        return problems

    def compose(self, request, snapshot, delivery_id) -> dict[str, Any]:
        """`{"text", "reply_markup"}`: the text with the first state's keyboard (none when
        `snapshot` is None). Raises `MessageRefused` (field `text`) over Telegram's limits."""
        markup = telegram_cards.keyboard(snapshot, delivery_id, None) if snapshot else None
        message = render.TelegramMessage(request.text, markup)
        problems = render.limit_problems(message)
        if problems:
            raise answer_channels.MessageRefused({"text": problems[:20]})
        return message.to_json()

    def content_hash(self, request) -> str:
        return feedback_cards.content_hash({"text": request.text})

    def send(self, delivery, request, composed) -> str:
        """`sendMessage` through the Telegram channel; returns `tg:<chat_id>:<message_id>`.
        Raises `AnswerSendError` (Telegram's error_code)."""
        telegram = channels.get("telegram")
        if telegram.name != "telegram":
            raise answer_channels.AnswerSendError("no_telegram_channel")
        try:
            entity = telegram.send(
                delivery.bot,
                composed,
                receive_id=request.chat_id,
                uuid=delivery.delivery_id,
                purpose="feedback",
            )
        except cards.InvalidCard:
            raise answer_channels.AnswerSendError("invalid_message") from None
        except telegram.send_errors as exc:
            raise answer_channels.AnswerSendError(str(getattr(exc, "code", "") or "unknown"))
        return entity.open_message_id

    def queue_repaint(self, delivery) -> None:
        """Queue the keyboard's repaint (`RENDERER`) in the caller's transaction; applied by
        the card worker after the tap's answer."""
        entity = CardEntity.objects.for_send(delivery.bot, delivery.delivery_id).first()
        if entity is None or not (entity.address or {}).get("message_id"):
            log.warning("delivery %s: no Telegram message to update", delivery.delivery_id)
            return
        cards.enqueue_render(entity, RENDERER)


def render_update(card: CardEntity) -> dict[str, Any] | None:
    """`{"reply_markup"}` of the Telegram answer shown by `card` for its delivery's current
    revision (no `text`: the channel edits the keyboard only); None when there is nothing to
    update. The card worker calls it when it applies the update."""
    delivery = answer_channels.shown_delivery(card, Delivery.Channel.TELEGRAM)
    if delivery is None:
        return None
    choice = feedback_cards.Choice.of(delivery.current_revision)
    return {
        "reply_markup": telegram_cards.keyboard(
            delivery.policy_snapshot, delivery.delivery_id, choice
        )
    }


def _delivery_of(action: CardAction) -> Delivery | None:
    return (
        Delivery.objects.filter(
            bot=action.bot,
            channel=Delivery.Channel.TELEGRAM,
            platform_message_id=action.open_message_id,
        )
        .exclude(platform_message_id="")
        .select_related("current_revision")
        .first()
    )


def _at(items: Any, index: int) -> dict[str, Any]:
    items = items if isinstance(items, list) else []
    return items[index] if 0 <= index < len(items) and isinstance(items[index], dict) else {}


def on_tap(action: CardAction) -> Answer:
    """A tap on a feedback button of a Telegram answer (module docstring). Unknown data or a
    message that is no feedback answer → a warning toast, nothing written."""
    parsed = telegram_cards.parse_callback_data(action.value.get("data"))
    if parsed is None:
        return Answer.warning(gettext_lazy("This button has no action Cardloop understands."))
    verb, index, rev = parsed
    delivery = _delivery_of(action)
    if delivery is None or not delivery.feedback_shown or not delivery.policy_snapshot:
        return Answer.warning(gettext_lazy("This feedback target no longer exists."))
    snapshot = delivery.policy_snapshot
    if verb == telegram_cards.STATUS:
        choice = feedback_cards.Choice.of(delivery.current_revision)
        return Answer.info(_Lazy(lambda: telegram_cards.status_toast(snapshot, choice)))
    where = {
        "delivery_id": delivery.delivery_id,
        "operator_open_id": action.operator_open_id,
        "rev": rev,
        "open_message_id": action.open_message_id,
        "open_chat_id": action.open_chat_id,
    }
    if verb == telegram_cards.VERDICT:
        key = _at(snapshot.get("buttons"), index).get("key") or ""
        return revisions.record_choice(action.bot, verdict_key=key, **where).answer()
    followup = snapshot.get("negative_followup") or {}
    reason = ""
    if verb == telegram_cards.REASON:
        reason = _at(followup.get("reasons"), index).get("key") or ""
        if not reason:
            return Answer.warning(gettext_lazy("This option is no longer available."))
        if not (followup.get("comment") or {}).get("required"):
            return revisions.record_details(
                action.bot, form_value={feedback_cards.REASON_FIELD: reason}, **where
            ).answer()
    return _prompt_for_comment(action, delivery, reason, where)


def claim_comment_prompt(
    action: CardAction, delivery: Delivery, reason: str, where: dict[str, Any]
) -> tuple[revisions.Outcome | None, TelegramCommentPrompt | None, bool]:
    """`(refusal, prompt row, send)` for tap `action` asking for a comment on `delivery`, in
    one transaction with the delivery's row locked (`revisions.detail_refusal`): the refusal
    `Outcome` when the operator may not add details now (no row written), else the tap's
    prompt row (`prompts.claim`: at most one prompt per tap) and whether this run sends it.
    A new prompt deletes the operator's earlier prompts on the delivery and every prompt of
    the bot older than `TelegramCommentPrompt.PROMPT_LIFETIME`."""
    with transaction.atomic():
        refused = revisions.detail_refusal(action.bot, **where)
        if refused is not None:
            return refused, None, False
        prompt, send = prompts.claim(
            TelegramCommentPrompt,
            bot=action.bot,
            event_id=action.event_id,
            chat_id=str(action.open_chat_id),
            delivery=delivery,
            operator_open_id=action.operator_open_id,
            rev=where["rev"],
            reason_key=reason,
        )
        if send:
            cutoff = timezone.now() - TelegramCommentPrompt.PROMPT_LIFETIME
            TelegramCommentPrompt.objects.filter(
                Q(delivery=delivery, operator_open_id=action.operator_open_id)
                | Q(bot=action.bot, created_at__lt=cutoff)
            ).exclude(pk=prompt.pk).delete()
        return None, prompt, send


def _prompt_for_comment(
    action: CardAction, delivery: Delivery, reason: str, where: dict[str, Any]
) -> Answer:
    """Send the `force_reply` comment prompt, once per tap (`claim_comment_prompt`), when the
    operator may add details now; else the refusal's toast."""
    refused, prompt, send = claim_comment_prompt(action, delivery, reason, where)
    if refused is not None:
        return refused.answer()
    if send:
        tg = telegram_bot(action.bot)
        message = telegram_cards.comment_prompt(delivery.policy_snapshot)
        token = tg.secret("bot_token") if tg is not None else ""
        if not prompts.send(prompt, token, message, settings.CARDLOOP_TELEGRAM_API_BASE_URL):
            return Answer.error(gettext_lazy("Telegram did not take the prompt; please try again."))
    return Answer.info(gettext_lazy("Reply to the message below with your comment."))


def on_reply(bot, message: dict[str, Any]) -> bool:
    """A person's reply to a bot message (`handlers.use_reply_handler`): when it answers a
    comment prompt of `bot`, the prompted person's text is recorded as the details of their
    verdict (`record_comment`) and the outcome is replied in their language; True. Anyone
    else's reply to a prompt, and a reply to a prompt already answered, is ignored (True); a
    reply to any other message (or a `reply_to_message` without an integer `message_id`) is
    not this handler's (False). Never logs the text."""
    reply_to = message.get("reply_to_message")
    replied = reply_to.get("message_id") if isinstance(reply_to, dict) else None
    if not isinstance(replied, int) or isinstance(replied, bool):
        return False
    chat = message.get("chat") if isinstance(message.get("chat"), dict) else {}
    sender = message.get("from") if isinstance(message.get("from"), dict) else {}
    prompt = (
        TelegramCommentPrompt.objects.filter(
            bot=bot, chat_id=str(chat.get("id") or ""), message_id=replied
        )
        .select_related("delivery")
        .first()
    )
    if prompt is None:
        return False
    operator = str(sender.get("id") or "")
    text = message.get("text")
    if operator != prompt.operator_open_id or not isinstance(text, str):
        log.info("delivery %s: a reply to its comment prompt ignored", prompt.delivery.delivery_id)
        return True
    outcome = record_comment(bot, prompt, text, str(chat.get("id") or ""))
    if outcome is None:
        log.info("delivery %s: a second reply to a comment prompt ignored", prompt.delivery_id)
        return True
    with translation.override(handlers.reader_language(sender)):
        answer = str(outcome.message)
    transaction.on_commit(lambda: _reply(bot, chat.get("id"), message.get("message_id"), answer))
    return True


def record_comment(
    bot, prompt: TelegramCommentPrompt, text: str, chat_id: str
) -> revisions.Outcome | None:
    """Record `text` as the details of `prompt`'s verdict (`revisions.record_details` with the
    prompt's reason and rev) and delete the prompt, in one transaction with the delivery's row
    locked first (the lock order of `claim_comment_prompt`); a comment the policy refuses
    (`INVALID_DETAILS`: too long, empty) keeps the prompt for another reply. None, with
    nothing written, when the prompt is gone (its reply was recorded meanwhile)."""
    with transaction.atomic():
        Delivery.objects.select_for_update().filter(pk=prompt.delivery_id).first()
        if not TelegramCommentPrompt.objects.filter(pk=prompt.pk).exists():
            return None
        outcome = revisions.record_details(
            bot,
            delivery_id=prompt.delivery.delivery_id,
            operator_open_id=prompt.operator_open_id,
            rev=prompt.rev,
            form_value={
                feedback_cards.REASON_FIELD: prompt.reason_key,
                feedback_cards.COMMENT_FIELD: text,
            },
            open_message_id=prompt.delivery.platform_message_id,
            open_chat_id=chat_id,
        )
        if outcome.code != revisions.INVALID_DETAILS:
            TelegramCommentPrompt.objects.filter(pk=prompt.pk).delete()
    return outcome


def _reply(bot, chat_id, message_id, text: str) -> None:
    telegram = channels.get("telegram")
    try:
        telegram.reply_text(bot, {"chat_id": chat_id, "message_id": message_id}, text)
    except telegram.send_errors as exc:
        log.warning("telegram comment reply failed: %s", getattr(exc, "code", ""))
