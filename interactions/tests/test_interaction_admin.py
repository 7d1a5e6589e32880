"""Admin of interactions (read-only, filtered by status/kind/bot) and of "always" approval
rules (list, revoke through `approvals.revoke_rule`)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from interactions.approvals import service as approvals
from interactions.models import ApprovalRule
from interactions.tests.ia_helpers import *  # noqa: F403


@pytest.fixture
def staff(admin_client):
    admin_client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    return admin_client


@pytest.fixture
def world(make_bot, make_interaction):
    bot = make_bot(app_id="cli_admin_ia")
    pending = make_interaction(bot)
    quick = make_interaction(bot, "quick_reply", title="Pick a branch")
    approvals.answer(quick, choice="yes", via="api", check_operator=False)
    always = make_interaction(bot, title="Deploy?")
    approvals.answer(always, choice="always", via="api", check_operator=False)
    return bot, pending, quick, always


def test_interaction_list_filters_by_status_kind_and_bot(staff, world):
    bot, pending, quick, _always = world
    url = reverse("admin:interactions_interaction_changelist")
    page = staff.get(url).content.decode()
    assert pending.public_id in page and quick.public_id in page
    only_pending = staff.get(url, {"status__exact": "pending"}).content.decode()
    assert pending.public_id in only_pending and quick.public_id not in only_pending
    only_quick = staff.get(url, {"kind__exact": "quick_reply"}).content.decode()
    assert quick.public_id in only_quick and pending.public_id not in only_quick
    assert pending.public_id in staff.get(url, {"bot__id__exact": bot.pk}).content.decode()


def test_interaction_detail_is_read_only_and_nothing_can_be_added_or_deleted(staff, world):
    _bot, pending, quick, _always = world
    detail = staff.get(reverse("admin:interactions_interaction_change", args=[quick.pk]))
    assert detail.status_code == 200
    html = detail.content.decode()
    assert "&quot;via&quot;: &quot;api&quot;" in html and 'name="title"' not in html
    assert staff.get(reverse("admin:interactions_interaction_add")).status_code == 403
    response = staff.post(reverse("admin:interactions_interaction_delete", args=[pending.pk]))
    assert response.status_code == 403


def test_rules_are_listed_and_revoked_from_the_admin(staff, world):
    bot, _pending, _quick, always = world
    rule = ApprovalRule.objects.get()
    url = reverse("admin:interactions_approvalrule_changelist")
    page = staff.get(url).content.decode()
    assert "bash" in page and always.public_id in page
    response = staff.post(url, {"action": "revoke", "_selected_action": [rule.pk]}, follow=True)
    assert "1 rule revoked." in response.content.decode()
    rule.refresh_from_db()
    assert rule.revoked_at is not None
    assert approvals.check_rule(bot, "bash", session_id="sess_1") is None
    assert (
        "bash" not in staff.get(url, {"state": "active"}).content.decode().split("result_list")[-1]
    )


def test_staff_who_may_only_view_rules_cannot_revoke_them(client, world):
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_approvalrule"))
    client.force_login(viewer)
    rule = ApprovalRule.objects.get()
    url = reverse("admin:interactions_approvalrule_changelist")
    page = client.get(url)
    assert page.status_code == 200 and 'value="revoke"' not in page.content.decode()
    client.post(url, {"action": "revoke", "_selected_action": [rule.pk]})
    rule.refresh_from_db()
    assert rule.revoked_at is None
