"""A feedback click reads only `Delivery.CLICK_COLUMNS` of its locked delivery: every path of
a click (a first verdict, a reselect, the negative form, a stale click, a repeat, an
unchanged choice, a refusal) runs without loading a deferred column, which would cost a query
inside the click's transaction (real ingress, real database, every thread watched)."""

from __future__ import annotations

import pytest
from django.db import transaction

from feedback.models import Delivery, Revision
from feedback.tests.conftest import drain_card_updates

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def deferred_loads(monkeypatch):
    """The deferred fields loaded from a Delivery (Django reloads one through
    `refresh_from_db(fields=[…])`), in any thread."""
    loads: list[tuple[str, ...]] = []
    original = Delivery.refresh_from_db

    def recording(self, using=None, fields=None, from_queryset=None):
        loads.append(tuple(fields or ()))
        return original(self, using=using, fields=fields, from_queryset=from_queryset)

    monkeypatch.setattr(Delivery, "refresh_from_db", recording)
    return loads


def _rev(delivery) -> str:
    current = Delivery.objects.select_related("current_revision").get(pk=delivery.pk)
    return current.current_revision.revision_id if current.current_revision_id else ""


def test_the_click_lock_reads_only_the_click_columns(delivery):
    with transaction.atomic():
        locked = Delivery.objects.lock_for_click(delivery.bot, delivery.delivery_id)
    loaded = {f.attname for f in Delivery._meta.concrete_fields} - locked.get_deferred_fields()
    fields = Delivery._meta.concrete_fields
    assert loaded == {f.attname for f in fields if f.column in Delivery.CLICK_COLUMNS}
    assert "usage" in locked.get_deferred_fields()
    assert locked.policy_snapshot == delivery.policy_snapshot


def test_every_click_path_runs_without_loading_a_deferred_delivery_column(
    delivery, click, deferred_loads
):
    assert click(delivery, "incorrect")[1]["toast"]["type"] == "success"
    first = _rev(delivery)
    assert click(delivery, "incorrect", rev=first)[1]["toast"]["type"] == "info"  # unchanged
    _, answer = click.detail(delivery, first, {"fb_reason": "incomplete", "fb_comment": "x"})
    assert answer["toast"]["type"] == "success"
    body = click.payload(delivery, "conclusive_usable", rev=_rev(delivery))
    assert click.post(body)[1]["toast"]["type"] == "success"  # reselect
    assert click.post(body)[1]["toast"]["type"] == "success"  # the same event again
    assert click(delivery, "conclusive_usable", rev=first)[1]["toast"]["type"] == "warning"
    assert click(delivery, "conclusive_usable", operator="ou_x")[1]["toast"]["type"] == "warning"
    assert click(delivery, "no_such_key")[1]["toast"]["type"] == "warning"
    drain_card_updates()
    assert Revision.objects.filter(delivery=delivery).count() == 3
    assert deferred_loads == []
