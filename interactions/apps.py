from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InteractionsConfig(AppConfig):
    """Feishu adapter, card-action registry, pending interactions, progress cards, panels."""

    name = "interactions"
    verbose_name = _("Interactions")

    def ready(self) -> None:
        from interactions.approvals import service as approvals
        from interactions.approvals import textcommands
        from interactions.asks import service as asks
        from interactions.callbacks import registry

        # Interactions across channels (issue 6): button clicks and typed /_interaction commands.
        registry.register("interaction", approvals.on_card_action)
        registry.register_event("im.message.receive_v1", textcommands.on_message)
        # Progress cards and asks (issue 7): importing asks registers its resolve() hook and
        # the card-queue renderer "progress".
        registry.register("feishu_ask", asks.on_ask_action)
        registry.register("progress", asks.on_progress_action)
