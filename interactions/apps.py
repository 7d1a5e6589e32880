from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InteractionsConfig(AppConfig):
    """Feishu adapter, card-action registry, pending interactions, progress cards, panels."""

    name = "interactions"
    verbose_name = _("Interactions")

    def ready(self) -> None:
        from interactions import approvals, registry, textcommands

        # Interactions across channels (issue 6): button clicks and typed /_interaction commands.
        registry.register("interaction", approvals.on_card_action)
        registry.register_event("im.message.receive_v1", textcommands.on_message)
