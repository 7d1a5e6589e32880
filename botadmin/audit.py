"""The audit trail: every change of a policy layer, key, token, secret or destination.

Call `record()` inside the transaction that makes the change, so the entry and the change
commit together. Secret values must never be passed in: describe secrets as "set"/"not set".
"""

from __future__ import annotations

from typing import Any

from django.db import models

from botadmin.models import AuditEntry

SET = "set"
NOT_SET = "not set"


def secret_state(ref: str) -> str:
    """ "set" or "not set" for a secret ref: the only form a secret takes in the audit log."""
    return SET if ref else NOT_SET


def record(
    actor: Any,
    action: str,
    target: models.Model,
    before: Any = None,
    after: Any = None,
) -> AuditEntry:
    """Write one audit entry.

    `actor` is a user (or None for the system / a command), `action` a dotted verb such as
    `policy.changed`, `apikey.created`, `secret.set`; `before`/`after` are JSON-able values.
    """
    is_user = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditEntry.objects.create(
        actor=actor if is_user and getattr(actor, "pk", None) else None,
        actor_repr=(actor.get_username() if is_user else (str(actor) if actor else "system"))[:150],
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:200],
        before=before,
        after=after,
    )
