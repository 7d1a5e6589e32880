from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class InteractionsConfig(AppConfig):
    """Feishu adapter, card-action registry, pending interactions, progress cards, panels."""

    name = "interactions"
    verbose_name = _("Interactions")
