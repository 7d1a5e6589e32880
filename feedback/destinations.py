"""Webhook destinations: create / change / delete with audit, write-only signing secrets with
rotation, and disabling (by staff or after a receiver answered 410).

Secrets live in the secret store behind `secret_ref` (never in a column, the audit log or a
log line). Rotation keeps the old secret as `previous_secret_ref` until
`previous_secret_expires_at`; during that grace period every request carries two `v1,`
signatures (Standard Webhooks allows several, space-separated), so a receiver can switch
secrets without dropping a request. Secret files of replaced secrets are deleted after commit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext
from django.utils.translation import gettext as _

from botadmin import audit
from feedback import webhooks
from feedback.envelopes import FEED_TYPES
from feedback.models import WebhookDestination
from plumbing.secretstore import delete_secret, read_secret, write_secret

#: Grace period of a rotated secret unless the operator chooses another one.
DEFAULT_GRACE = timedelta(hours=24)
#: Longest grace period accepted (one week).
MAX_GRACE = timedelta(days=7)
TIMEOUT_MIN_MS = 100
TIMEOUT_MAX_MS = 30_000


class InvalidDestination(ValueError):
    """A destination value is not acceptable; `field` names the form field, `message` says
    why (a lazy translation: rendered in the language active where it is shown); `refusal`
    is the `webhooks.DestinationRefused` behind a refused URL (else None)."""

    def __init__(self, field: str, message, *, refusal: webhooks.DestinationRefused | None = None):
        super().__init__(field, message)
        self.field = field
        self.message = message
        self.refusal = refusal

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _url_refused_message(refusal: webhooks.DestinationRefused) -> str:
    return gettext("This URL is refused: %(reason)s.") % {"reason": refusal.message()}


@dataclass(frozen=True)
class SecretChange:
    """What to do with the signing secret on save.

    `action`: `keep` (no change), `generate` (a new random secret, returned once) or `set`
    (use `value`, a pasted `whsec_…` secret). When a secret already exists, the old one keeps
    signing for `grace` (0 = replace at once; at most MAX_GRACE).
    """

    action: str = "keep"
    value: str = ""
    grace: timedelta = DEFAULT_GRACE


def snapshot(destination: WebhookDestination) -> dict[str, Any]:
    """The audit form of a destination: every setting, secrets only as "set" / "not set"."""
    data: dict[str, Any] = {
        "name": destination.name,
        "url": destination.url,
        "enabled": destination.enabled,
        "disabled_reason": destination.disabled_reason,
        "event_types": list(destination.event_types or []),
        "timeout_ms": destination.timeout_ms,
        "include_comment": destination.include_comment,
        "secret": audit.secret_state(destination.secret_ref),
        "previous_secret": audit.secret_state(destination.previous_secret_ref),
        "previous_secret_expires_at": (
            destination.previous_secret_expires_at.isoformat()
            if destination.previous_secret_expires_at
            else None
        ),
    }
    if destination.pk:
        data["teams"] = sorted(destination.teams.values_list("pk", flat=True))
        data["bots"] = sorted(destination.bots.values_list("pk", flat=True))
    return data


def validate_destination(destination: WebhookDestination) -> None:
    """Check the values a destination is saved with; raises InvalidDestination.

    - url: the one registration rule, `webhooks.check_registration_url` (https, no userinfo,
      no fragment; unless CARDLOOP_WEBHOOK_ALLOW_PRIVATE no literal private/loopback target,
      no `localhost` name and no single-label name);
    - event_types: a non-empty subset of the feed types;
    - timeout_ms: 100–30000.
    """
    try:
        webhooks.check_registration_url(destination.url)
    except webhooks.DestinationRefused as exc:
        message = lazy(functools.partial(_url_refused_message, exc), str)()
        raise InvalidDestination("url", message, refusal=exc) from None
    types = list(destination.event_types or [])
    if not types:
        raise InvalidDestination("event_types", _("Choose at least one event type."))
    unknown = sorted(set(types) - set(FEED_TYPES))
    if unknown:
        raise InvalidDestination("event_types", _("Unknown event type(s): %s") % ", ".join(unknown))
    if not TIMEOUT_MIN_MS <= int(destination.timeout_ms) <= TIMEOUT_MAX_MS:
        raise InvalidDestination("timeout_ms", _("The timeout must be 0.1–30 seconds."))


def save_destination(
    destination: WebhookDestination,
    *,
    actor: Any,
    teams: list | None = None,
    bots: list | None = None,
    secret: SecretChange = SecretChange(),
    now: datetime | None = None,
) -> str | None:
    """Create or update `destination` (its field values as the caller set them), its team and
    bot assignment (None = unchanged) and its secret, in one transaction with audit entries
    (`webhook_destination.created` / `.changed`, plus `.secret_generated` / `.secret_set` /
    `.secret_rotated` when the secret changes).

    Returns the generated secret (to show once, never stored elsewhere) or None.
    Re-enabling clears `disabled_reason`. A new destination needs a secret (`generate` or
    `set`). Raises InvalidDestination (field, message) for bad values.
    """
    now = now or timezone.now()
    validate_destination(destination)
    if secret.grace < timedelta(0) or secret.grace > MAX_GRACE:
        raise InvalidDestination("grace_hours", _("The grace period must be 0–168 hours."))
    value = None
    generated = None
    if secret.action == "generate":
        value = generated = webhooks.generate_secret()
    elif secret.action == "set":
        try:
            value = webhooks.normalize_secret(secret.value)
        except ValueError as exc:
            raise InvalidDestination("secret_value", str(exc)) from None
    elif secret.action != "keep":
        raise InvalidDestination("secret_action", _("Unknown secret action."))
    if value is None and not destination.secret_ref:
        raise InvalidDestination(
            "secret_action", _("A destination needs a secret: generate one or paste one.")
        )

    with transaction.atomic():
        stored = (
            WebhookDestination.objects.select_for_update().filter(pk=destination.pk).first()
            if destination.pk
            else None
        )
        before = snapshot(stored) if stored else None
        if stored is not None:
            # Secret refs are never taken from the caller's instance (the form cannot set them).
            destination.secret_ref = stored.secret_ref
            destination.previous_secret_ref = stored.previous_secret_ref
            destination.previous_secret_expires_at = stored.previous_secret_expires_at
            if destination.enabled and not stored.enabled:
                destination.disabled_reason = ""
        obsolete: list[str] = []
        secret_action = None
        if value is not None:
            new_ref = write_secret(value)
            if destination.secret_ref and secret.grace > timedelta(0):
                obsolete.append(destination.previous_secret_ref)
                destination.previous_secret_ref = destination.secret_ref
                destination.previous_secret_expires_at = now + secret.grace
                secret_action = "webhook_destination.secret_rotated"  # noqa: S105 - an audit action
            else:
                obsolete += [destination.secret_ref, destination.previous_secret_ref]
                destination.previous_secret_ref = ""
                destination.previous_secret_expires_at = None
                secret_action = (
                    "webhook_destination.secret_generated"
                    if generated
                    else "webhook_destination.secret_set"
                )
            destination.secret_ref = new_ref
        destination.save()
        if teams is not None:
            destination.teams.set(teams)
        if bots is not None:
            destination.bots.set(bots)
        after = snapshot(destination)
        audit.record(
            actor,
            "webhook_destination.created" if before is None else "webhook_destination.changed",
            destination,
            before,
            after,
        )
        if secret_action and before is not None:
            audit.record(
                actor,
                secret_action,
                destination,
                {"secret": before["secret"], "previous_secret": before["previous_secret"]},
                {
                    "secret": after["secret"],
                    "previous_secret": after["previous_secret"],
                    "previous_secret_expires_at": after["previous_secret_expires_at"],
                },
            )
        _delete_after_commit(obsolete)
    return generated


def disable_destination(destination_id: int, *, reason: str, actor: Any = None) -> bool:
    """Disable a destination with `reason` (e.g. after HTTP 410) and audit it
    (`webhook_destination.disabled`). Returns False when it was already disabled. Rows of a
    disabled destination stay pending until it is enabled again."""
    with transaction.atomic():
        destination = (
            WebhookDestination.objects.select_for_update().filter(pk=destination_id).first()
        )
        if destination is None or not destination.enabled:
            return False
        before = {"enabled": True, "disabled_reason": destination.disabled_reason}
        destination.enabled = False
        destination.disabled_reason = reason[:200]
        destination.save(update_fields=["enabled", "disabled_reason", "updated_at"])
        audit.record(
            actor,
            "webhook_destination.disabled",
            destination,
            before,
            {"enabled": False, "disabled_reason": destination.disabled_reason},
        )
    return True


def delete_destination(destination: WebhookDestination, *, actor: Any) -> None:
    """Delete a destination (its outbox rows and attempt log go with it), audited
    (`webhook_destination.deleted`); its secret files are removed after commit."""
    with transaction.atomic():
        audit.record(actor, "webhook_destination.deleted", destination, snapshot(destination), None)
        refs = [destination.secret_ref, destination.previous_secret_ref]
        destination.delete()
        _delete_after_commit(refs)


def signing_secrets(destination: WebhookDestination, now: datetime) -> list[str]:
    """The secrets that sign a request now: the current one, then the previous one while its
    grace period lasts (`now < previous_secret_expires_at`). Missing files are skipped."""
    found = [read_secret(destination.secret_ref)]
    expires = destination.previous_secret_expires_at
    if destination.previous_secret_ref and expires and now < expires:
        found.append(read_secret(destination.previous_secret_ref))
    return [s for s in found if s]


def purge_expired_secrets(now: datetime | None = None) -> int:
    """Forget rotated secrets whose grace period is over (audited as
    `webhook_destination.previous_secret_expired`, files deleted after commit). Returns how
    many destinations changed. Run periodically by the outbox worker."""
    now = now or timezone.now()
    count = 0
    with transaction.atomic():
        expired = WebhookDestination.objects.select_for_update().filter(
            previous_secret_expires_at__lte=now
        )
        for destination in expired:
            ref = destination.previous_secret_ref
            destination.previous_secret_ref = ""
            destination.previous_secret_expires_at = None
            destination.save(
                update_fields=["previous_secret_ref", "previous_secret_expires_at", "updated_at"]
            )
            audit.record(
                None,
                "webhook_destination.previous_secret_expired",
                destination,
                {"previous_secret": audit.secret_state(ref)},
                {"previous_secret": audit.NOT_SET},
            )
            _delete_after_commit([ref])
            count += 1
    return count


def _delete_after_commit(refs: list[str]) -> None:
    refs = [r for r in refs if r]
    if refs:
        transaction.on_commit(lambda: [delete_secret(r) for r in refs])
