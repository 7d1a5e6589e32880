"""Alert rules and the alerts they fire.

An `AlertRule` watches one figure of one scope (a team, a bot, or everything) over a sliding
window; `analytics.alerts.rules` measures and decides, `analytics.alerts.service` records.
An `Alert` is one breach: it is fired once when the figure crosses the threshold and resolved
when it is back past the threshold by the rule's clear margin (hysteresis), so a figure that
wobbles around the threshold neither re-fires nor flaps. At most one alert of a rule is open
at a time (a partial unique constraint), which is also what makes several alert workers fire a
breach once.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from botadmin.models import Bot, Chat, Team


class AlertRule(models.Model):
    """One watched figure (see `Kind`) of a scope over `window_minutes`."""

    class Kind(models.TextChoices):
        POSITIVE_RATE_BELOW = "positive_rate_below", _("positive rate below X %")
        NEGATIVES_ABOVE = "negatives_above", _("negative ratings above N")
        NEGATIVES_GROWTH = "negatives_growth", _("negative ratings above k × the previous window")
        FAILURE_RATE_ABOVE = "failure_rate_above", _("delivery failure rate above Y %")
        DEAD_ITEMS_ABOVE = "dead_items_above", _("dead outbox items and card updates above Z")

    name = models.CharField(_("name"), max_length=100, unique=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        verbose_name=_("team"),
        help_text=_("Watch this team's deliveries. Empty team and bot: every delivery."),
    )
    bot = models.ForeignKey(
        Bot,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        verbose_name=_("bot"),
        help_text=_("Watch this bot's deliveries (with a team: that team's deliveries of it)."),
    )
    kind = models.CharField(_("figure"), max_length=24, choices=Kind.choices)
    threshold = models.FloatField(
        _("threshold"),
        help_text=_(
            "Rates in percent (positive rate below 60 → 60), counts as a number (negatives "
            "above 20 → 20), growth as a factor (more than 3 × the previous window → 3)."
        ),
    )
    window_minutes = models.PositiveIntegerField(
        _("window (minutes)"),
        default=60,
        help_text=_("The figure is computed over the last this many minutes (5 to 43200)."),
    )
    min_ratings = models.PositiveIntegerField(
        _("minimum sample"),
        default=20,
        help_text=_(
            "Below this many ratings (positive rate), negative ratings (growth) or deliveries "
            "(failure rate) in the window the rule neither fires nor resolves."
        ),
    )
    clear_margin = models.FloatField(
        _("clear margin"),
        default=5,
        help_text=_(
            "Hysteresis: an alert resolves only when the figure is this far on the good side "
            "of the threshold (same unit as the threshold), so it does not flap."
        ),
    )
    notify_bot = models.ForeignKey(
        Bot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("notify with bot"),
        help_text=_("The bot that posts the alert card (dry run when it has no app secret)."),
    )
    notify_chat = models.ForeignKey(
        Chat,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("notify chat"),
        help_text=_("The Feishu chat the alert card goes to. Empty: events only."),
    )
    muted_until = models.DateTimeField(
        _("muted until"),
        null=True,
        blank=True,
        help_text=_("Until then the rule fires nothing (an open alert can still resolve)."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("alert rule")
        verbose_name_plural = _("alert rules")

    def __str__(self) -> str:
        return self.name

    def clean(self):
        errors = {}
        if (self.notify_bot_id is None) != (self.notify_chat_id is None):
            errors["notify_chat"] = _("Choose both a bot and a chat to notify, or neither.")
        if not 5 <= (self.window_minutes or 0) <= 43200:
            errors["window_minutes"] = _("Use 5 to 43200 minutes (30 days).")
        if self.threshold is not None:
            if self.kind in (self.Kind.POSITIVE_RATE_BELOW, self.Kind.FAILURE_RATE_ABOVE) and not (
                0 <= self.threshold <= 100
            ):
                errors["threshold"] = _("A rate threshold is a percentage from 0 to 100.")
            elif self.threshold < 0:
                errors["threshold"] = _("The threshold cannot be negative.")
        if self.clear_margin is not None and self.clear_margin < 0:
            errors["clear_margin"] = _("The clear margin cannot be negative.")
        if errors:
            raise ValidationError(errors)

    def is_muted(self, now) -> bool:
        return self.muted_until is not None and self.muted_until > now


class Alert(models.Model):
    """One breach of a rule: fired once, resolved once (see the module docstring)."""

    class Notice(models.TextChoices):
        NONE = "none", _("no card")
        PENDING = "pending", _("pending")
        SENT = "sent", _("sent")
        FAILED = "failed", _("failed")

    rule = models.ForeignKey(
        AlertRule, on_delete=models.CASCADE, related_name="alerts", verbose_name=_("rule")
    )
    fired_at = models.DateTimeField(_("fired at"), default=timezone.now)
    resolved_at = models.DateTimeField(_("resolved at"), null=True, blank=True)
    value = models.FloatField(_("figure when fired"))
    resolved_value = models.FloatField(_("figure when resolved"), null=True, blank=True)
    threshold = models.FloatField(_("threshold"))
    sample = models.PositiveIntegerField(
        _("sample"), default=0, help_text=_("Ratings or deliveries the figure was computed from.")
    )
    window_start = models.DateTimeField(_("window start"))
    window_end = models.DateTimeField(_("window end"))
    notice = models.CharField(_("card"), max_length=8, choices=Notice.choices, default=Notice.NONE)
    card_id = models.CharField(_("card_id"), max_length=64, blank=True, default="")
    open_message_id = models.CharField(_("open_message_id"), max_length=64, blank=True, default="")
    notice_error = models.CharField(_("card error"), max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-fired_at", "-id"]
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        constraints = [
            models.UniqueConstraint(
                fields=["rule"],
                condition=Q(resolved_at__isnull=True),
                name="alert_one_open_per_rule",
            )
        ]
        indexes = [models.Index(fields=["fired_at", "id"], name="alert_history")]

    def __str__(self) -> str:
        return f"{self.rule} @ {self.fired_at:%Y-%m-%d %H:%M}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None
