"""Request fields of the JSON API that take exactly what the OpenAPI schema says.

DRF's `CharField` turns a number into its text (`{"open_id": 0}` became the owner "0") and
says nothing in the schema about a required string being non-empty. `StrictCharField` refuses
anything but a JSON string, and a required one that may not be blank carries `minLength: 1`
and the pattern "holds a non-space character" (surrounding spaces are trimmed before the
blank check). `OpenIdField` is a Feishu user id: `ou_` followed by letters, digits, `_` or `-`
(Feishu's open_id form), at most 64 characters.
"""

from __future__ import annotations

from django.core.validators import MinLengthValidator, RegexValidator
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

#: A Feishu open_id: `ou_` and then letters, digits, `_` or `-`.
OPEN_ID_PATTERN = r"^ou_[A-Za-z0-9_-]+$"
OPEN_ID_MAX_LENGTH = 64
NOT_ONLY_SPACES = RegexValidator(r"\S", _("This field may not be blank."), code="blank")


class StrictCharField(serializers.CharField):
    """A `CharField` that takes only JSON strings (see the module docstring)."""

    default_error_messages = {"not_a_string": _("Not a valid string.")}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.allow_blank:
            if self.min_length is None:
                self.min_length = 1
                self.validators.append(
                    MinLengthValidator(1, message=_("This field may not be blank."))
                )
            if self.trim_whitespace:
                self.validators.append(NOT_ONLY_SPACES)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class StrictRegexField(serializers.RegexField):
    """A `RegexField` that takes only JSON strings."""

    default_error_messages = {"not_a_string": _("Not a valid string.")}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class OpenIdField(StrictCharField):
    """A Feishu open_id (`ou_…`, at most 64 characters); blank only when `allow_blank`."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", OPEN_ID_MAX_LENGTH)
        super().__init__(**kwargs)
        # One pattern in the schema: the open_id form already holds a non-space character.
        self.validators = [v for v in self.validators if v is not NOT_ONLY_SPACES]
        self.validators.append(
            RegexValidator(
                OPEN_ID_PATTERN,
                _("Use a Feishu open_id: ou_ followed by letters, digits, _ or -."),
                code="invalid",
            )
        )


#: An https URL as the schema describes it: a host name of up to four labels, then an optional
#: path and query (a subset of what Django's `URLValidator` takes, so a URL that fits it is
#: accepted). Empty is allowed where the field may be blank.
HTTPS_URL_PATTERN = (
    r"^(?:https://[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
    r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?){0,2}\.[a-z]{2,24}"
    r"(?:[/?][A-Za-z0-9._~%!$&'()*+,;=:@/?-]*)?)?$"
)


@extend_schema_field({"type": "string", "pattern": HTTPS_URL_PATTERN, "maxLength": 500})
class HttpsUrlField(serializers.URLField):
    """An https URL (the view refuses other schemes); documented by `HTTPS_URL_PATTERN`."""


class StrictBooleanField(serializers.BooleanField):
    """A `BooleanField` that takes only JSON `true` and `false` (DRF's also takes 0, 1,
    "yes", "on", …, which the schema's boolean does not)."""

    default_error_messages = {"not_a_boolean": _("Use true or false.")}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("not_a_boolean")
        return data


@extend_schema_field(
    {
        "type": "object",
        "nullable": True,
        "additionalProperties": True,
        "description": "A JSON object (or null), at most 8 KiB serialized.",
    }
)
class JsonObjectField(serializers.JSONField):
    """A JSON object (or null); the view checks that it is one and its size."""
