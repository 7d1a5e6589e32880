from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InteractionsConfig(AppConfig):
    """Channels (Feishu, text fallback), the callback pipeline, the one interaction lifecycle,
    approvals, asks and progress sessions, question panels, the card queue."""

    name = "interactions"
    verbose_name = _("Interactions")

    def ready(self) -> None:
        # Imported here, not at the top: Django loads apps.py before the models exist, and
        # these modules import the models.
        from interactions import channels
        from interactions.approvals import handlers as approval_handlers
        from interactions.approvals import textcommands
        from interactions.asks import card as session_card
        from interactions.asks import handlers as ask_handlers
        from interactions.asks import service as asks
        from interactions.callbacks import registry
        from interactions.cardqueue import service as cards
        from interactions.channels.feishu.channel import FeishuChannel
        from interactions.channels.slack import ingress as slack_ingress
        from interactions.channels.slack.channel import SlackChannel
        from interactions.channels.telegram import asks as telegram_asks
        from interactions.channels.telegram import handlers as telegram
        from interactions.channels.telegram.channel import TelegramChannel
        from interactions.channels.text import text_channels
        from interactions.lifecycle import resolve as lifecycle
        from interactions.models import Interaction
        from interactions.signin import service as signin  # noqa: F401 - connects its receiver

        # The channels interactions can be shown on (a new channel registers here).
        channels.register(FeishuChannel())
        channels.register(TelegramChannel())
        channels.register(SlackChannel())
        for channel in text_channels():
            channels.register(channel)
        # Approvals, quick replies, forms: button clicks and typed /_interaction commands.
        registry.register("interaction", approval_handlers.on_card_action)
        registry.register_event("im.message.receive_v1", textcommands.on_message)
        registry.register_event(slack_ingress.SLACK_MESSAGE, slack_ingress.on_message)
        slack_ingress.use_text_commands(textcommands.handle, textcommands.SILENT_IN_CHATS)
        # Asks and progress cards: an ask's resolution re-renders its session's card (rendered
        # from the database when the queue applies it) and tells the requester's panels.
        # An ask's Telegram keyboard state (its "Other" text too) goes with its resolution.
        lifecycle.register_resolution_hook(
            Interaction.Kind.ASK, telegram_asks.after_resolution(asks.on_resolved)
        )
        cards.register_renderer(session_card.RENDERER, session_card.render_card_entity)
        registry.register("feishu_ask", ask_handlers.on_ask_action)
        registry.register("progress", ask_handlers.on_progress_action)
        # Telegram: button taps (callback queries) and typed commands (messages).
        registry.register(telegram.CALLBACK_KIND, telegram.on_callback)
        registry.register_event(telegram.MESSAGE_EVENT, telegram.on_message)
        telegram.use_text_commands(textcommands.handle, textcommands.SILENT_IN_CHATS)
        telegram_asks.use_asks(asks.submit_answers, session_card.refresh_card)
