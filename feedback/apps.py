from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class FeedbackConfig(AppConfig):
    """Deliveries, revisions, worker terminals, events, the outbox and webhooks.

    Registers its card-action handlers (`feedback`, `feedback_detail` →
    `feedback.revisions`) in `interactions.callbacks.registry`, its event sink in
    `interactions.events`, its feedback-area renderers with the Feishu, Slack and Telegram channels, its
    answer channels (`feedback.answer_channels`) and its
    chat-saved hook (`deliveries.link_chat`) in `botadmin.services` from `ready()`, so
    neither `interactions` nor `botadmin` imports `feedback`.
    """

    name = "feedback"
    verbose_name = _("Feedback")

    def ready(self) -> None:
        # Here, not at the top: these modules import models, which Django allows only once
        # the app registry is ready (the usual `AppConfig.ready` pattern).
        from feedback import cards, events, revisions
        from interactions import channels
        from interactions import events as interaction_events
        from interactions.callbacks import registry

        # The Feishu channel renders feedback areas with this app's renderer (it owns the
        # area's rules and lives above interactions, so it is handed over, not imported).
        channels.get("feishu").use_feedback_renderer(cards.feedback_area)
        # The Slack channel likewise gets the Block Kit form of the area, once it is registered
        # (an unregistered kind resolves to the webhook text channel, which takes none).
        from feedback import slack_cards

        slack = channels.get("slack")
        if slack.name == "slack" and hasattr(slack, "use_feedback_renderer"):
            slack.use_feedback_renderer(slack_cards.feedback_area)
        # A Slack answer's message is rendered when its update is applied (read back, the
        # feedback blocks replaced), so the queue never holds the answer.
        from feedback import slack_delivery
        from interactions.cardqueue import service as card_queue

        card_queue.register_renderer(slack_delivery.RENDERER, slack_delivery.render_update)
        # Final answers on channels other than Feishu go through their answer channel.
        from feedback import answer_channels

        answer_channels.register(slack_delivery.SlackAnswers())
        # Telegram answers: taps on their keyboard and replies to their comment prompts are
        # handed to the Telegram channel's handlers, the keyboard to the channel, and it is
        # repainted when its update is applied (the answer's text is never kept).
        from feedback import telegram_cards, telegram_delivery

        answer_channels.register(telegram_delivery.TelegramAnswers())
        card_queue.register_renderer(telegram_delivery.RENDERER, telegram_delivery.render_update)
        telegram = channels.get("telegram")
        if telegram.name == "telegram":
            from interactions.channels.telegram import handlers as telegram_handlers

            telegram.use_feedback_renderer(telegram_cards.keyboard)
            for verb in telegram_cards.VERBS:
                telegram_handlers.use_callback_handler(verb, telegram_delivery.on_tap)
            telegram_handlers.use_reply_handler(telegram_delivery.on_reply)

        registry.register("feedback", revisions.on_feedback)
        registry.register("feedback_detail", revisions.on_feedback_detail)

        def sink(type_, event_id, data, *, bot=None, team=None, time=None):
            return events.emit(type_, event_id, data, bot=bot, team=team, time=time)

        interaction_events.register_sink(sink)

        # A chat saved later links the deliveries sent to its chat_id before it existed, in
        # the chat's own transaction (botadmin sits below feedback and never imports it).
        from botadmin import services as botadmin_services
        from feedback import deliveries

        botadmin_services.register_chat_saved(deliveries.link_chat)
