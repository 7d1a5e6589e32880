"""Admin forms for policy layers and bot secrets, and the effective-policy preview.

A policy layer is edited two ways on the same page: structured fields (every part can stay on
"inherit") and an advanced JSON field holding the same partial layer. Whichever of the two the
user changed is validated with `botadmin.policy.validate_layer`; every `(path, message)` error is
attached to the form field that holds that path, so it appears next to the field, and the
ModelAdmin saves nothing. The validated layer is `form.policy_layer`; the ModelAdmin stores it
through `botadmin.services.set_policy_layer` / `set_chat_policy`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.forms.models import ModelFormMetaclass
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from botadmin import policy as pol
from botadmin.models import Bot, BotApiKey, ChatPolicy, ManagerToken, Team
from plumbing.parsers import contains_unstorable

BUTTON_ROWS = pol.BUTTONS_MAX
REASON_ROWS = pol.REASONS_MAX
#: Columns of one button row / one reason row of the structured editor.
BUTTON_PARTS = ("key", "label", "label_en", "semantic", "style")
REASON_PARTS = ("key", "label", "label_en")

INHERIT = ""
TRI_CHOICES = [(INHERIT, _("inherit")), ("on", _("on")), ("off", _("off"))]
SEMANTIC_CHOICES = [
    ("positive", _("positive")),
    ("progress", _("progress")),
    ("negative", _("negative")),
]
STYLE_CHOICES = [
    ("", _("by semantic")),
    ("primary", _("primary")),
    ("default", _("default")),
    ("danger", _("danger")),
]
AGENT_OPTIONS_CHOICES = [
    (INHERIT, _("inherit")),
    ("off", _("off: only the configured options")),
    ("buttons", _("buttons: the backend may propose the buttons of an answer")),
    ("buttons_and_reasons", _("buttons and reasons: the backend may propose both")),
]
AUDIENCE_CHOICES = [
    (INHERIT, _("inherit")),
    ("requester", _("requester: only the person who asked")),
    ("reviewers", _("reviewers: the open_ids listed below")),
    ("everyone", _("everyone in the chat")),
]


class LayerJSONField(forms.JSONField):
    """JSON textarea that shows the layer indented, with Chinese text unescaped."""

    def to_python(self, value):
        try:
            parsed = super().to_python(value)
        except RecursionError:  # absurdly deep JSON: a field error, not a 500
            raise forms.ValidationError(gettext("JSON is nested too deeply."), code="invalid")
        except ValueError:  # not JSONDecodeError: a number of more than 4300 digits
            raise forms.ValidationError(gettext("Enter a valid JSON."), code="invalid")
        if contains_unstorable(parsed):  # "\u0000" or a lone "\ud800" escape in the text
            raise forms.ValidationError(
                gettext("JSON strings must not contain NUL or lone surrogate characters."),
                code="invalid",
            )
        return parsed

    def bound_data(self, data, initial):
        try:
            parsed = super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return forms.fields.InvalidJSONInput(data)
        if contains_unstorable(parsed):  # re-shown as typed: UTF-8 cannot hold it decoded
            return forms.fields.InvalidJSONInput(data)
        return parsed

    def prepare_value(self, value):
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


class LinesField(forms.CharField):
    """Textarea text with browser line endings (CRLF) normalized, so an untouched textarea
    never counts as changed."""

    def to_python(self, value):
        value = super().to_python(value)
        return value.replace("\r\n", "\n").replace("\r", "\n") if isinstance(value, str) else value


def _tri(label, help_text) -> forms.ChoiceField:
    return forms.ChoiceField(label=label, choices=TRI_CHOICES, required=False, help_text=help_text)


def _layer_fields() -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = {
        "pl_enabled": _tri(
            _("Feedback"),
            _(
                "On shows feedback buttons on final answers; off hides them. Feedback is off by "
                "default; the most specific layer that sets it wins (team < bot < chat)."
            ),
        ),
        "pl_visible_override": forms.BooleanField(
            label=_("Set visible semantics"),
            required=False,
            help_text=_(
                "Unticked: inherit. Ticked: exactly the semantics ticked below are shown "
                "(1 to 3); each needs at least one button."
            ),
        ),
        "pl_visible_semantics": forms.MultipleChoiceField(
            label=_("Visible semantics"),
            choices=SEMANTIC_CHOICES,
            required=False,
            widget=forms.CheckboxSelectMultiple,
        ),
        "pl_buttons_override": forms.BooleanField(
            label=_("Set buttons"),
            required=False,
            help_text=_(
                "Unticked: inherit. Ticked: the 2 to 4 rows below replace the inherited "
                "buttons. Key: a-z, 0-9, _ or -, unique; label: 1 to 24 characters."
            ),
        ),
        "pl_reasons_override": forms.BooleanField(
            label=_("Set negative reasons"),
            required=False,
            help_text=_(
                "Unticked: inherit. Ticked: the rows below (0 to 6; none = no reasons) "
                "replace the inherited reasons. Label: 1 to 32 characters."
            ),
        ),
        "pl_comment_enabled": _tri(
            _("Comment box"), _("Whether a negative choice offers a comment box (default on).")
        ),
        "pl_comment_required": _tri(
            _("Comment required"), _("Whether a negative choice needs a comment (default off).")
        ),
        "pl_comment_placeholder": forms.CharField(
            label=_("Comment placeholder"),
            required=False,
            strip=False,
            help_text=_("1 to 100 characters; empty = inherit."),
        ),
        "pl_comment_placeholder_en": forms.CharField(
            label=_("Comment placeholder (English)"),
            required=False,
            strip=False,
            help_text=_(
                "Shown to readers whose Feishu is in English; 1 to 100 characters; empty = "
                "inherit (a new main placeholder without it drops the inherited English one)."
            ),
        ),
        "pl_agent_options": forms.ChoiceField(
            label=_("Options proposed by the bot backend"),
            choices=AGENT_OPTIONS_CHOICES,
            required=False,
            help_text=_(
                "Whether an answer's own feedback_options (POST /api/v1/deliveries) replace "
                "the buttons, or the buttons and reasons, configured here (default off)."
            ),
        ),
        "pl_comment_max_length": forms.IntegerField(
            label=_("Comment max length"),
            required=False,
            help_text=_("Characters, 1 to 2000 (default 1000); empty = inherit."),
        ),
        "pl_allow_reselect": _tri(
            _("Allow reselect"),
            _("Whether a person may change their choice after clicking (default off)."),
        ),
        "pl_audience": forms.ChoiceField(
            label=_("Audience"),
            choices=AUDIENCE_CHOICES,
            required=False,
            help_text=_(
                "Who may give feedback. The list of reviewers is frozen on each answer "
                "when it is sent."
            ),
        ),
        "pl_reviewers": LinesField(
            label=_("Reviewers"),
            required=False,
            widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
            help_text=_(
                "open_ids (ou_…), one per line or separated by commas; at most 50. Only "
                "with audience “reviewers”; empty = not set."
            ),
        ),
        "pl_json": LayerJSONField(
            label=_("Layer as JSON"),
            required=False,
            widget=forms.Textarea(attrs={"rows": 12, "cols": 80, "class": "vLargeTextField"}),
            help_text=_(
                "The same partial layer as the fields above, for advanced edits. Change "
                "either the fields or this JSON in one save, not both. {} inherits "
                "everything."
            ),
        ),
    }
    for i in range(BUTTON_ROWS):
        fields[f"pl_button_{i}_key"] = forms.CharField(label=_("Key"), required=False)
        fields[f"pl_button_{i}_label"] = forms.CharField(
            label=_("Label"), required=False, strip=False
        )
        fields[f"pl_button_{i}_label_en"] = forms.CharField(
            label=_("English label"), required=False, strip=False
        )
        fields[f"pl_button_{i}_semantic"] = forms.ChoiceField(
            label=_("Semantic"), choices=[("", "—"), *SEMANTIC_CHOICES], required=False
        )
        fields[f"pl_button_{i}_style"] = forms.ChoiceField(
            label=_("Style"), choices=STYLE_CHOICES, required=False
        )
    for i in range(REASON_ROWS):
        fields[f"pl_reason_{i}_key"] = forms.CharField(label=_("Reason key"), required=False)
        fields[f"pl_reason_{i}_label"] = forms.CharField(
            label=_("Reason label"), required=False, strip=False
        )
        fields[f"pl_reason_{i}_label_en"] = forms.CharField(
            label=_("English reason label"), required=False, strip=False
        )
    return fields


LAYER_FIELD_NAMES: tuple[str, ...] = tuple(_layer_fields())
STRUCTURED_FIELD_NAMES: tuple[str, ...] = tuple(n for n in LAYER_FIELD_NAMES if n != "pl_json")


def policy_fieldsets() -> list[tuple[Any, dict[str, Any]]]:
    """Admin fieldsets for the layer fields (append to a ModelAdmin's own fieldsets)."""
    return [
        (
            _("Feedback policy layer"),
            {
                "fields": [
                    "pl_enabled",
                    "pl_allow_reselect",
                    "pl_audience",
                    "pl_reviewers",
                    "pl_agent_options",
                ],
                "description": _(
                    "Every field left on “inherit” (or empty) comes from the layer above: "
                    "built-in defaults < team < bot < chat. Only what you set here is stored."
                ),
            },
        ),
        (_("Visible semantics"), {"fields": ["pl_visible_override", "pl_visible_semantics"]}),
        (
            _("Buttons"),
            {
                "fields": [
                    "pl_buttons_override",
                    *[
                        tuple(f"pl_button_{i}_{part}" for part in BUTTON_PARTS)
                        for i in range(BUTTON_ROWS)
                    ],
                ]
            },
        ),
        (
            _("Negative follow-up"),
            {
                "fields": [
                    "pl_reasons_override",
                    *[
                        tuple(f"pl_reason_{i}_{part}" for part in REASON_PARTS)
                        for i in range(REASON_ROWS)
                    ],
                    ("pl_comment_enabled", "pl_comment_required"),
                    ("pl_comment_placeholder", "pl_comment_placeholder_en"),
                    "pl_comment_max_length",
                ]
            },
        ),
        (_("Advanced"), {"fields": ["pl_json"]}),
    ]


def _tri_initial(value: Any) -> str:
    return "on" if value is True else "off" if value is False else INHERIT


def _tri_value(choice: str) -> bool | None:
    return True if choice == "on" else False if choice == "off" else None


_REVIEWER_SPLIT = re.compile(r"[\s,;]+")
_INDEXED = re.compile(r"^(buttons|negative_followup\.reasons)\[(\d+)\](?:\.(\w+))?")


class _PolicyLayerMethods:
    """Behaviour of `PolicyLayerModelForm`; the fields come from `_layer_fields()`."""

    #: Name of the model field holding the layer.
    layer_attr = "policy"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        layer = getattr(self.instance, self.layer_attr, None) if self.instance else None
        self.initial_layer: dict[str, Any] = layer if isinstance(layer, dict) else {}
        self.policy_layer: dict[str, Any] | None = None
        self._button_rows: list[int] = []
        self._reason_rows: list[int] = []
        for name, value in self._structured_initial(self.initial_layer).items():
            self.initial.setdefault(name, value)
        self.initial.setdefault("pl_json", self.initial_layer)

    # -- layer ⇄ structured fields -------------------------------------------------------------

    @staticmethod
    def _structured_initial(layer: dict[str, Any]) -> dict[str, Any]:
        initial: dict[str, Any] = {
            "pl_enabled": _tri_initial(layer.get("enabled")),
            "pl_allow_reselect": _tri_initial(layer.get("allow_reselect")),
            "pl_audience": layer.get("audience", INHERIT)
            if isinstance(layer.get("audience"), str)
            else INHERIT,
        }
        reviewers = layer.get("reviewers")
        initial["pl_reviewers"] = (
            "\n".join(str(r) for r in reviewers) if isinstance(reviewers, list) else ""
        )
        visible = layer.get("visible_semantics")
        initial["pl_visible_override"] = "visible_semantics" in layer
        initial["pl_visible_semantics"] = list(visible) if isinstance(visible, list) else []
        buttons = layer.get("buttons")
        initial["pl_buttons_override"] = "buttons" in layer
        for i, button in enumerate(buttons if isinstance(buttons, list) else []):
            if i >= BUTTON_ROWS or not isinstance(button, dict):
                continue
            for part in BUTTON_PARTS:
                initial[f"pl_button_{i}_{part}"] = button.get(part, "")
        followup = layer.get("negative_followup")
        followup = followup if isinstance(followup, dict) else {}
        reasons = followup.get("reasons")
        initial["pl_reasons_override"] = "reasons" in followup
        for i, reason in enumerate(reasons if isinstance(reasons, list) else []):
            if i >= REASON_ROWS or not isinstance(reason, dict):
                continue
            for part in REASON_PARTS:
                initial[f"pl_reason_{i}_{part}"] = reason.get(part, "")
        comment = followup.get("comment")
        comment = comment if isinstance(comment, dict) else {}
        initial["pl_comment_enabled"] = _tri_initial(comment.get("enabled"))
        initial["pl_comment_required"] = _tri_initial(comment.get("required"))
        initial["pl_comment_placeholder"] = comment.get("placeholder", "")
        initial["pl_comment_placeholder_en"] = comment.get("placeholder_en", "")
        initial["pl_agent_options"] = (
            layer["agent_options"] if isinstance(layer.get("agent_options"), str) else INHERIT
        )
        initial["pl_comment_max_length"] = comment.get("max_length")
        return initial

    def _layer_from_structured(self, data: dict[str, Any]) -> dict[str, Any]:
        layer: dict[str, Any] = {}
        enabled = _tri_value(data.get("pl_enabled") or "")
        if enabled is not None:
            layer["enabled"] = enabled
        if data.get("pl_visible_override"):
            chosen = data.get("pl_visible_semantics") or []
            layer["visible_semantics"] = [s for s in pol.SEMANTICS if s in chosen]
        self._button_rows = []
        if data.get("pl_buttons_override"):
            buttons = []
            for i in range(BUTTON_ROWS):
                parts = {p: data.get(f"pl_button_{i}_{p}") or "" for p in BUTTON_PARTS}
                if not any(parts.values()):
                    continue
                button = {
                    "key": parts["key"],
                    "label": parts["label"],
                    "semantic": parts["semantic"],
                }
                if parts["label_en"]:
                    button["label_en"] = parts["label_en"]
                if parts["style"]:
                    button["style"] = parts["style"]
                buttons.append(button)
                self._button_rows.append(i)
            layer["buttons"] = buttons
        followup: dict[str, Any] = {}
        self._reason_rows = []
        if data.get("pl_reasons_override"):
            reasons = []
            for i in range(REASON_ROWS):
                parts = {p: data.get(f"pl_reason_{i}_{p}") or "" for p in REASON_PARTS}
                if any(parts.values()):
                    reason = {"key": parts["key"], "label": parts["label"]}
                    if parts["label_en"]:
                        reason["label_en"] = parts["label_en"]
                    reasons.append(reason)
                    self._reason_rows.append(i)
            followup["reasons"] = reasons
        comment: dict[str, Any] = {}
        for flag in ("enabled", "required"):
            value = _tri_value(data.get(f"pl_comment_{flag}") or "")
            if value is not None:
                comment[flag] = value
        if data.get("pl_comment_placeholder"):
            comment["placeholder"] = data["pl_comment_placeholder"]
        if data.get("pl_comment_placeholder_en"):
            comment["placeholder_en"] = data["pl_comment_placeholder_en"]
        if data.get("pl_comment_max_length") is not None:
            comment["max_length"] = data["pl_comment_max_length"]
        if comment:
            followup["comment"] = comment
        if followup:
            layer["negative_followup"] = followup
        reselect = _tri_value(data.get("pl_allow_reselect") or "")
        if reselect is not None:
            layer["allow_reselect"] = reselect
        if data.get("pl_audience"):
            layer["audience"] = data["pl_audience"]
        if data.get("pl_agent_options"):
            layer["agent_options"] = data["pl_agent_options"]
        reviewers = [r for r in _REVIEWER_SPLIT.split(data.get("pl_reviewers") or "") if r]
        if reviewers:
            layer["reviewers"] = reviewers
        return layer

    def _field_for_path(self, path: str) -> str:
        """The structured form field that shows errors at `path` (fallback: the JSON field)."""
        m = _INDEXED.match(path)
        if m:
            index, part = int(m.group(2)), m.group(3)
            if m.group(1) == "buttons":
                rows, prefix, parts = self._button_rows, "pl_button", BUTTON_PARTS
            else:
                rows, prefix, parts = self._reason_rows, "pl_reason", REASON_PARTS
            if index < len(rows):
                return f"{prefix}_{rows[index]}_{part if part in parts else 'key'}"
        simple = {
            "enabled": "pl_enabled",
            "visible_semantics": "pl_visible_override",
            "buttons": "pl_buttons_override",
            "negative_followup.reasons": "pl_reasons_override",
            "negative_followup.comment.enabled": "pl_comment_enabled",
            "negative_followup.comment.required": "pl_comment_required",
            "negative_followup.comment.placeholder": "pl_comment_placeholder",
            "negative_followup.comment.placeholder_en": "pl_comment_placeholder_en",
            "negative_followup.comment.max_length": "pl_comment_max_length",
            "agent_options": "pl_agent_options",
            "allow_reselect": "pl_allow_reselect",
            "audience": "pl_audience",
        }
        if path.startswith("visible_semantics["):
            return "pl_visible_semantics"
        if path == "reviewers" or path.startswith("reviewers["):
            return "pl_reviewers"
        return simple.get(path, "pl_json")

    # -- validation ------------------------------------------------------------------------------

    def clean(self):
        cleaned = super().clean()
        changed = set(self.changed_data)
        json_changed = "pl_json" in changed
        structured_changed = bool(changed.intersection(STRUCTURED_FIELD_NAMES))
        if any(name in self.errors for name in LAYER_FIELD_NAMES):
            return cleaned  # a field could not even be parsed (e.g. max length "abc")
        if json_changed and structured_changed:
            self.add_error(
                "pl_json",
                gettext("Change either the structured fields or the JSON in one save, not both."),
            )
            return cleaned
        if json_changed:
            layer = cleaned.get("pl_json")
            layer = {} if layer is None else layer
            to_field = lambda path: "pl_json"  # noqa: E731
        elif structured_changed:
            layer = self._layer_from_structured(cleaned)
            to_field = self._field_for_path
        else:
            layer = self.initial_layer
            to_field = lambda path: "pl_json"  # noqa: E731
        try:
            self.policy_layer = pol.validate_layer(layer)
        except pol.PolicyError as exc:
            for path, message in exc.errors:
                self.add_error(to_field(path), f"{path}: {message}" if path else message)
        return cleaned


PolicyLayerModelForm = ModelFormMetaclass(
    "PolicyLayerModelForm",
    (_PolicyLayerMethods, forms.ModelForm),
    {
        **_layer_fields(),
        "__module__": __name__,
        "__doc__": "ModelForm base with a policy layer editor.",
    },
)


class TeamForm(PolicyLayerModelForm):
    class Meta:
        model = Team
        fields = ["name", "description"]


class ChatPolicyForm(PolicyLayerModelForm):
    class Meta:
        model = ChatPolicy
        fields = ["bot", "chat"]


def secret_fields(label, clear_label) -> tuple[forms.CharField, forms.BooleanField]:
    """The two form fields of one write-only secret: its input (never rendered back:
    `PasswordInput(render_value=False)`; blank = keep; surrounding whitespace stripped) and its
    "clear" box. Declare them as `name, clear_name = secret_fields(...)` in a form using
    `WriteOnlySecretsFormMixin`."""
    value = forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
    return value, forms.BooleanField(label=clear_label, required=False)


def refuse_set_and_clear(form: forms.Form, cleaned: dict, names) -> None:
    """Add a form error on `clear_<name>` for every write-only secret `name` of `names` that
    was given a new value and ticked "clear" in the same save: either would silently undo the
    other, so the person is asked to choose."""
    for name in names:
        if cleaned.get(name) and cleaned.get(f"clear_{name}"):
            form.add_error(
                f"clear_{name}", gettext("Either enter a new value or clear it, not both.")
            )


class WriteOnlySecretsFormMixin:
    """ModelForm mixin for a model with write-only secrets (`SECRET_FIELDS`, `has_secret`):
    the form declares `name, clear_name = secret_fields(...)` for each name of
    `Meta.model.SECRET_FIELDS`; this mixin says in each input's help text only whether it is
    set (`secret_help_text`; never the value) and refuses a value and "clear" for the same
    secret in one save. The admin saves them with `botadmin.admin.WriteOnlySecretsAdmin`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in self._meta.model.SECRET_FIELDS:
            is_set = bool(self.instance.pk) and self.instance.has_secret(name)
            self.fields[name].help_text = self.secret_help_text(is_set)

    def secret_help_text(self, is_set: bool) -> str:
        """The help text of a secret's input: whether it is set (translated)."""
        return gettext("Set. Leave blank to keep it.") if is_set else gettext("Not set.")

    def clean(self):
        cleaned = super().clean()
        refuse_set_and_clear(self, cleaned, self._meta.model.SECRET_FIELDS)
        return cleaned


class BotForm(WriteOnlySecretsFormMixin, PolicyLayerModelForm):
    """Bot fields, the layer editor and the three write-only secrets (never rendered back:
    `PasswordInput(render_value=False)`, help text says only "set" / "not set")."""

    app_secret, clear_app_secret = secret_fields(_("App secret"), _("Clear app secret"))
    encrypt_key, clear_encrypt_key = secret_fields(_("Encrypt key"), _("Clear encrypt key"))
    verification_token, clear_verification_token = secret_fields(
        _("Verification token"), _("Clear verification token")
    )

    class Meta:
        model = Bot
        fields = ["name", "app_id", "domain", "api_only", "card_language"]

    def secret_help_text(self, is_set: bool) -> str:
        state = gettext("set") if is_set else gettext("not set")
        return gettext(
            "Currently: %(state)s. Write-only: the value is never shown. Leave empty to keep it."
        ) % {"state": state}


SECRET_FORM_FIELDS: tuple[str, ...] = tuple(
    f for name in Bot.SECRET_FIELDS for f in (name, f"clear_{name}")
)


class ApiKeyIssueForm(forms.ModelForm):
    """Issuing a key: pick the bot, give a label; the key itself is generated."""

    class Meta:
        model = BotApiKey
        fields = ["bot", "label"]
        help_texts = {"label": _("What uses this key, e.g. “prod bot backend”.")}


class ManagerTokenIssueForm(forms.ModelForm):
    """Issuing a manager API token: pick the user, give a label; the token is generated."""

    class Meta:
        model = ManagerToken
        fields = ["user", "label"]
        help_texts = {"label": _("What uses this token, e.g. “weekly report script”.")}


# ---------------------------------------------------------------------------------------------
# Effective policy preview
# ---------------------------------------------------------------------------------------------

FIELD_LABELS = {
    "enabled": _("Feedback"),
    "visible_semantics": _("Visible semantics"),
    "buttons": _("Buttons"),
    "negative_followup.reasons": _("Negative reasons"),
    "negative_followup.comment.enabled": _("Comment box"),
    "negative_followup.comment.required": _("Comment required"),
    "negative_followup.comment.placeholder": _("Comment placeholder"),
    "negative_followup.comment.placeholder_en": _("Comment placeholder (English)"),
    "negative_followup.comment.max_length": _("Comment max length"),
    "allow_reselect": _("Allow reselect"),
    "audience": _("Audience"),
    "reviewers": _("Reviewers"),
    "agent_options": _("Options proposed by the bot backend"),
}
SOURCE_LABELS = {
    "default": _("built-in default"),
    "team": _("team"),
    "bot": _("bot"),
    "chat": _("chat"),
}


REASON_LABELS = {
    pol.REASON_ENABLED: _("on"),
    pol.REASON_DISABLED: _("off: disabled"),
    pol.REASON_API_ONLY: _("off: API only"),
    pol.REASON_AMBIGUOUS_TEAM: _("off: several teams"),
    pol.REASON_INVALID_POLICY: _("off: invalid merge"),
}


def reason_label(reason: str) -> str:
    """Short list-column text for a resolution reason."""
    return str(REASON_LABELS.get(reason, reason))


def explain_reason(resolution: pol.Resolution) -> str:
    """One sentence saying whether feedback is shown and, when not, why."""
    reason = resolution.reason
    if reason == pol.REASON_ENABLED:
        return gettext("Feedback is on.")
    if reason == pol.REASON_API_ONLY:
        return gettext(
            "Feedback is off: this bot is API-only, and API-only bots never show feedback."
        )
    if reason == pol.REASON_AMBIGUOUS_TEAM:
        names = ", ".join(str(t) for t in resolution.teams)
        return gettext(
            "Feedback is off: the chat is bound to several teams (%(teams)s), so no team policy "
            "can be chosen and it fails closed. Bind the chat to one team."
        ) % {"teams": names}
    if reason == pol.REASON_INVALID_POLICY:
        return gettext(
            "Feedback is off: the layers are each valid but their merge breaks a rule (listed "
            "below), so it fails closed."
        )
    source = resolution.sources.get("enabled", "default")
    if source == "default":
        return gettext("Feedback is off: no layer turns it on (it is off by default).")
    return gettext("Feedback is off: the %(layer)s layer sets it off.") % {
        "layer": SOURCE_LABELS[source]
    }


def _english(label: Any) -> SafeString | str:
    """` / <English label>` beside a main label in the preview (nothing without one)."""
    return format_html(' / <span lang="en">{}</span>', label) if label else ""


def _value_html(path: str, value: Any) -> SafeString | str:
    if path == "enabled":
        return gettext("on") if value else gettext("off")
    if isinstance(value, bool):
        return gettext("yes") if value else gettext("no")
    if path == "buttons":
        return format_html_join(
            "",
            "<div><code>{}</code> {}{} <small>({}, {})</small></div>",
            (
                (b["key"], b["label"], _english(b.get("label_en")), b["semantic"], b["style"])
                for b in value
            ),
        )
    if path == "negative_followup.reasons":
        if not value:
            return gettext("none")
        return format_html_join(
            "",
            "<div><code>{}</code> {}{}</div>",
            ((r["key"], r["label"], _english(r.get("label_en"))) for r in value),
        )
    if path == "agent_options":
        return str(dict(AGENT_OPTIONS_CHOICES).get(value, value))
    if value is None:
        return gettext("none")
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or gettext("none")
    return str(value)


def render_preview(resolution: pol.Resolution) -> SafeString:
    """HTML table: every field's effective value and its source layer, headed by the reason."""
    rows = []
    for path in pol.FIELD_PATHS:
        value = (
            resolution.layer_enabled
            if path == "enabled"
            else pol.field_value(resolution.policy, path)
        )
        source = resolution.sources[path]
        source_text = SOURCE_LABELS[source]
        if source == "team" and resolution.team is not None:
            source_text = f"{source_text}: {resolution.team}"
        rows.append((path, FIELD_LABELS[path], _value_html(path, value), source, source_text))
    body = format_html_join(
        "",
        '<tr data-path="{}"><th>{}</th><td>{}</td><td class="source source-{}">{}</td></tr>',
        rows,
    )
    problems = format_html_join(
        "", "<li><code>{}</code>: {}</li>", ((p or "(layer)", m) for p, m in resolution.problems)
    )
    status = "on" if resolution.enabled else "off"
    return format_html(
        '<div class="cardloop-preview" data-reason="{}">'
        '<p class="status status-{}"><strong>{}</strong></p>'
        "{}"
        "<table><thead><tr><th>{}</th><th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>"
        "{}"
        "</div>",
        resolution.reason,
        status,
        explain_reason(resolution),
        format_html('<ul class="problems errorlist">{}</ul>', problems)
        if resolution.problems
        else "",
        gettext("Field"),
        gettext("Effective value"),
        gettext("Source"),
        body,
        _notes(resolution.policy),
    )


#: What an answer's own options look like (`feedback_options` of POST /api/v1/deliveries).
AGENT_OPTIONS_EXAMPLE = (
    '{"buttons": [{"key": "plan_ok", "label": "方案可行", "label_en": "Plan works", '
    '"semantic": "positive"}, {"key": "plan_wrong", "label": "方案不对", "semantic": '
    '"negative"}], "reasons": [{"key": "too_risky", "label": "风险太大"}]}'
)


def _notes(policy: dict[str, Any]) -> SafeString:
    """How the effective policy reads in both languages, and whether answers may bring their own
    options (with an example), under the preview table."""
    languages = gettext(
        "Cards show Cardloop's text in Chinese and English, each reader in their Feishu "
        "language; a label or placeholder without an English form shows its main wording to "
        "English readers too."
    )
    mode = policy.get("agent_options", "off")
    if mode == "off":
        options = gettext(
            "Options proposed by the bot backend are ignored (the answer says "
            "agent_options_off); only the buttons above are shown."
        )
        example = ""
    else:
        options = (
            gettext(
                "Each answer may replace the buttons above with its own (feedback_options in "
                "POST /api/v1/deliveries), frozen on that answer; its reasons too."
            )
            if mode == "buttons_and_reasons"
            else gettext(
                "Each answer may replace the buttons above with its own (feedback_options in "
                "POST /api/v1/deliveries), frozen on that answer; the reasons above stay."
            )
        )
        example = AGENT_OPTIONS_EXAMPLE
    return format_html(
        '<p class="help notes-languages">{}</p><p class="help notes-agent-options">{}{}</p>',
        languages,
        options,
        format_html(" <code>{}</code>", example) if example else "",
    )


def layer_summary(layer: Any) -> str:
    """Short text for list columns: which fields a layer sets."""
    if not isinstance(layer, dict) or not layer:
        return gettext("inherits everything")
    parts = []
    if "enabled" in layer:
        parts.append(
            gettext("feedback on") if layer["enabled"] is True else gettext("feedback off")
        )
    parts.extend(k for k in layer if k != "enabled")
    return ", ".join(parts)
