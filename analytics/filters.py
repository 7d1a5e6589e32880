"""The one filter set of every analytics endpoint (summary, trend, reasons, failures, the
drill-down list and its CSV): parsing and validation of the query string into an
`AnalyticsQuery`, which `analytics.queries` applies to deliveries, latest ratings and outbox rows.

Parameters (snake_case names):
- `from`, `to` (required): `YYYY-MM-DD` (local midnight in `tz`) or ISO 8601 datetime; the range
  is `[from, to)`, `from < to`, at most 366 local days;
- `tz`: IANA zone of the report (default `CARDLOOP_REPORT_TZ`);
- delivery dimensions (frozen on the delivery at send time): `team` (team id), `bot` (app_id),
  `chat` (chat_id), `topic`, `model`, `cli`, `cli_version`, `skill`, `skill_version`,
  `workflow`, `task`, `status`, `channel` (feishu | slack);
- rating dimensions (on the latest rating of a (delivery, operator)): `semantic`, `verdict`
  (verdict key), `reason` (reason key).

Every value reaches SQL as a bound parameter. Errors are 400 `{"error": code, "detail":
{parameter: [message]}}`; the code is the first error's (`missing_from`, `invalid_range`,
`range_too_large`, `unknown_tz`, `invalid_filter`, …).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import django_filters
from django import forms
from django.conf import settings
from django.core.validators import RegexValidator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import QueryDict
from django.utils.translation import gettext_lazy as _

from analytics import periods
from feedback.models import Delivery, LatestFeedback, Semantic

#: The policy's key rule (`botadmin.policy`): verdict and reason keys are `[a-z0-9_-]+`.
KEY_VALIDATOR = RegexValidator(
    r"^[a-z0-9_-]+$", _("Use a key of lowercase letters, digits, _ and -."), code="invalid_filter"
)

#: query parameter → Delivery lookup (dimensions frozen at send time).
DELIVERY_DIMENSIONS: dict[str, str] = {
    "team": "team_id",
    "bot": "bot__app_id",
    "chat": "chat__chat_id",
    "topic": "topic_id",
    "model": "model",
    "cli": "cli_id",
    "cli_version": "cli_version",
    "skill": "skill_name",
    "skill_version": "skill_version",
    "workflow": "workflow_id",
    "task": "task_id",
    "status": "status",
    "channel": "channel",
}
#: query parameter → LatestFeedback field.
RATING_DIMENSIONS: dict[str, str] = {
    "semantic": "semantic",
    "verdict": "verdict_key",
    "reason": "reason_key",
}
#: Parameters that must be present (checked in the form, named in the OpenAPI schema).
REQUIRED_PARAMETERS = ("from", "to")
#: Dimensions an event without a delivery still carries (`Event.team`, `Event.bot`).
EVENT_DIMENSIONS: dict[str, str] = {"team": "team_id", "bot": "bot__app_id"}


@dataclass(frozen=True)
class AnalyticsQuery:
    """A validated filter: `[start, end)` in UTC, the report zone, and the dimension values.

    `delivery_filters` maps a query parameter to its value (`{"model": "gpt-5"}`),
    `rating_filters` likewise (`{"semantic": "negative"}`). Build it with
    `AnalyticsFilterSet(...).query`; tests may construct it directly.
    """

    start: datetime
    end: datetime
    tz: zoneinfo.ZoneInfo
    delivery_filters: dict[str, Any] = field(default_factory=dict)
    rating_filters: dict[str, Any] = field(default_factory=dict)

    @property
    def previous(self) -> tuple[datetime, datetime]:
        """`(start, end)` of the previous period of equal length (see `periods`)."""
        return periods.previous_period(self.start, self.end, self.tz)

    def delivery_q(self, prefix: str = "") -> Q:
        """The delivery-dimension filters as a Q on `Delivery` reached through `prefix`
        (`""`, `"delivery__"`, `"event__delivery__"`)."""
        return Q(**{prefix + DELIVERY_DIMENSIONS[k]: v for k, v in self.delivery_filters.items()})

    def rating_q(self, prefix: str = "") -> Q:
        """The rating-dimension filters as a Q on `LatestFeedback` reached through `prefix`."""
        return Q(**{prefix + RATING_DIMENSIONS[k]: v for k, v in self.rating_filters.items()})

    def has_matching_rating(self, delivery_ref: str = "pk") -> Exists:
        """EXISTS a latest rating of the delivery at `OuterRef(delivery_ref)` that matches the
        rating filters (use only when `rating_filters` is not empty)."""
        return Exists(
            LatestFeedback.objects.filter(self.rating_q(), delivery_id=OuterRef(delivery_ref))
        )

    def event_without_delivery_q(self) -> Q | None:
        """For outbox rows whose event has no delivery: a Q on `OutboxItem` applying the
        dimensions such an event carries (team, bot), or None when the filter uses a dimension
        it cannot carry (then those rows never match)."""
        if self.rating_filters or set(self.delivery_filters) - set(EVENT_DIMENSIONS):
            return None
        return Q(**{"event__" + EVENT_DIMENSIONS[k]: v for k, v in self.delivery_filters.items()})


class IntegerFilter(django_filters.Filter):
    """A filter whose value is a whole number (ids): 1 to 2**63 - 1, the range of the
    databases' bigint ids (a larger number reached the query and failed there: a 500)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class _AnalyticsForm(forms.Form):
    """Cross-field rules: the range and the zone."""

    def clean(self):
        data = super().clean()
        tz_name = (self.data.get("tz") or "").strip() or settings.CARDLOOP_REPORT_TZ
        try:
            tz = periods.resolve_zone(tz_name)
        except periods.UnknownZone:
            self.add_error(
                "tz",
                forms.ValidationError(
                    _("Unknown time zone %(tz)s: use an IANA name such as Asia/Shanghai."),
                    code="unknown_tz",
                    params={"tz": tz_name[:64]},
                ),
            )
            return data
        data["tz"] = tz
        bounds = {}
        for name in ("from", "to"):
            raw = self.data.get(name)
            if raw is None or not str(raw).strip():
                self.add_error(
                    name,
                    forms.ValidationError(_("This parameter is required."), code=f"missing_{name}"),
                )
                continue
            try:
                bounds[name] = periods.parse_boundary(str(raw), tz)
            except periods.OutOfRange:
                self.add_error(
                    name,
                    forms.ValidationError(
                        _("Use a date between 1970-01-01 and 9000-01-01."), code="out_of_range"
                    ),
                )
            except ValueError:
                self.add_error(
                    name,
                    forms.ValidationError(
                        _("Use a date (YYYY-MM-DD) or an ISO 8601 datetime."),
                        code=f"invalid_{name}",
                    ),
                )
        if len(bounds) == 2:
            start, end = bounds["from"], bounds["to"]
            if not start < end:
                self.add_error(
                    "to",
                    forms.ValidationError(
                        _("`to` must be later than `from`."), code="invalid_range"
                    ),
                )
            elif periods.exceeds_max_span(start, end, tz):
                self.add_error(
                    "to",
                    forms.ValidationError(
                        _("The range may span at most %(days)d days."),
                        code="range_too_large",
                        params={"days": periods.MAX_RANGE_DAYS},
                    ),
                )
            else:
                data["from"], data["to"] = start, end
        return data


class _SharedFields(dict):
    """A form's `base_fields` that every instance shares: a Django form deep-copies its fields
    per instance (`BaseForm.__init__`) so that one instance may change its own (a widget's
    attributes, a queryset, choices); this filter form never changes them, and its twenty
    fields with their widgets, validators and messages were copied on every API request
    (about a tenth of a small request's time). Each instance still gets its own dict."""

    def __deepcopy__(self, memo) -> dict:
        return dict(self)


def _text(name: str, max_length: int, label: str) -> django_filters.CharFilter:
    return django_filters.CharFilter(
        method="_by_query", max_length=max_length, label=label, field_name=name
    )


class AnalyticsFilterSet(django_filters.FilterSet):
    """The analytics filter set (see the module docstring for parameters and errors).

    `filterset.is_valid()` then `filterset.query` → `AnalyticsQuery`; `filterset.qs` is the
    filtered deliveries (time range, delivery dimensions, and "has a matching latest rating"
    when a rating dimension is given) — the drill-down list's rows.
    """

    locals()["from"] = django_filters.CharFilter(
        method="_by_query",
        label=_(
            "Start of the range (inclusive): YYYY-MM-DD (local midnight) or an ISO 8601 "
            "datetime, 1970-01-01 to 9000-01-01; earlier than `to`, at most 366 days before it."
        ),
    )
    to = django_filters.CharFilter(
        method="_by_query",
        label=_("End of the range (exclusive): YYYY-MM-DD (local midnight) or ISO 8601."),
    )
    tz = django_filters.CharFilter(
        method="_by_query",
        max_length=64,
        label=_(
            "IANA time zone of the report (such as Asia/Shanghai or UTC); default "
            "CARDLOOP_REPORT_TZ. Any other name is 400 `unknown_tz`."
        ),
    )
    team = IntegerFilter(method="_by_query", label=_("Team id (frozen on the delivery)."))
    bot = _text("bot", 64, _("Bot app_id (cli_…)."))
    chat = _text("chat", 64, _("Feishu chat_id (oc_…)."))
    topic = _text("topic", 128, _("Topic id."))
    model = _text("model", 100, _("Model name."))
    cli = _text("cli", 100, _("CLI id."))
    cli_version = _text("cli_version", 50, _("CLI version."))
    skill = _text("skill", 100, _("Skill name."))
    skill_version = _text("skill_version", 50, _("Skill version."))
    workflow = _text("workflow", 128, _("Workflow id."))
    task = _text("task", 128, _("Task id."))
    status = django_filters.ChoiceFilter(
        method="_by_query", choices=Delivery.Status.choices, label=_("Delivery status.")
    )
    channel = django_filters.ChoiceFilter(
        method="_by_query",
        choices=Delivery.Channel.choices,
        label=_("Channel the answer was sent on (feishu, slack)."),
    )
    semantic = django_filters.ChoiceFilter(
        method="_by_query", choices=Semantic.choices, label=_("Semantic of the latest rating.")
    )
    verdict = django_filters.CharFilter(
        method="_by_query",
        max_length=64,
        validators=[KEY_VALIDATOR],
        label=_("Verdict key of the latest rating."),
    )
    reason = django_filters.CharFilter(
        method="_by_query",
        max_length=64,
        validators=[KEY_VALIDATOR],
        label=_("Negative reason key of the latest rating."),
    )

    class Meta:
        model = Delivery
        fields: list[str] = []
        form = _AnalyticsForm

    def __init__(self, data=None, queryset=None, *, request=None, prefix=None):
        # django-filter deep-copies every filter for every instance (and builds a form class
        # from the copies), about half of this filter set's cost per API request. Its filters
        # are never applied one by one here (`filter_queryset` applies the query as a whole)
        # and never changed, so every instance reads the class's own, unbound.
        self.is_bound = data is not None
        self.data = data or QueryDict()
        self.queryset = queryset if queryset is not None else Delivery.objects.all()
        self.request = request
        self.form_prefix = prefix
        self.filters = self.base_filters

    @classmethod
    def get_form_class(cls) -> type[forms.Form]:
        """The form of the filters, built once per class; its instances share the class's
        fields (`_SharedFields`) instead of deep-copying them, as Django forms do."""
        form_class = cls.__dict__.get("_form_class")
        if form_class is None:
            fields = {name: flt.field for name, flt in cls.base_filters.items()}
            form_class = type(f"{cls.__name__}Form", (cls._meta.form,), fields)
            form_class.base_fields = _SharedFields(form_class.base_fields)
            cls._form_class = form_class
        return form_class

    def _by_query(self, queryset, name, value):
        return queryset  # applied as a whole in filter_queryset()

    @property
    def query(self) -> AnalyticsQuery:
        """The validated `AnalyticsQuery` (call `is_valid()` first)."""
        data = self.form.cleaned_data
        present = {k: v for k, v in data.items() if v not in (None, "")}
        return AnalyticsQuery(
            start=data["from"],
            end=data["to"],
            tz=data["tz"],
            delivery_filters={k: present[k] for k in DELIVERY_DIMENSIONS if k in present},
            rating_filters={k: present[k] for k in RATING_DIMENSIONS if k in present},
        )

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        query = self.query
        queryset = queryset.filter(
            query.delivery_q(), created_at__gte=query.start, created_at__lt=query.end
        )
        if query.rating_filters:
            queryset = queryset.filter(query.has_matching_rating())
        return queryset

    def error_code_and_detail(self) -> tuple[str, dict[str, list[str]]]:
        """`(code, {parameter: [messages]})` of an invalid filter set, for `ApiError`."""
        errors = self.form.errors.as_data()
        code = "invalid_filter"
        for field_errors in errors.values():
            first = field_errors[0].code
            if first and first not in (
                "invalid",
                "invalid_choice",
                "max_length",
                "min_value",
                "max_value",
                "required",
            ):
                code = first
            break
        detail = {
            name: [str(m) for err in errs for m in err.messages] for name, errs in errors.items()
        }
        return code, detail
