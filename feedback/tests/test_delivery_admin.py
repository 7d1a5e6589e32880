"""Read-only delivery admin: lists and explains deliveries, never shows comment text."""

from __future__ import annotations

import pytest

from feedback.models import Delivery, Revision

pytestmark = pytest.mark.django_db(transaction=True)


def test_delivery_admin_shows_the_snapshot_and_the_chain_but_never_the_comment(
    admin_client, feedback_api, click
):
    body = feedback_api.deliver(session_id="s-adm", turn_id="t-1").json()
    delivery = Delivery.objects.get(delivery_id=body["delivery_id"])
    click(delivery, "incorrect")
    delivery.refresh_from_db()
    click.detail(
        delivery,
        delivery.current_revision.revision_id,
        {"fb_reason": "incomplete", "fb_comment": "zzq private comment"},
    )
    assert Revision.objects.filter(comment="zzq private comment").exists()

    listing = admin_client.get("/admin/feedback/delivery/", {"feedback_shown__exact": "1"})
    assert listing.status_code == 200
    assert delivery.delivery_id in listing.content.decode()
    page = admin_client.get(f"/admin/feedback/delivery/{delivery.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "audience_open_ids" in html and "incomplete" in html
    assert "zzq private comment" not in html
    assert admin_client.get("/admin/feedback/delivery/add/").status_code == 403
