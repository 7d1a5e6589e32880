"""Moving `WebhookDestination` from botadmin to feedback changes the migration state only: a
database that holds destinations keeps them, their team and bot assignment, the outbox and
attempt-log rows that point at them, the permissions granted on them and their audit history.

Runs on SQLite and on PostgreSQL (whichever DATABASE_URL names): the database is migrated back
to the state before the move, filled through the historical models, and migrated forward.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from botadmin.models import AuditEntry, Bot, Team
from feedback.models import OutboxItem, WebhookAttempt, WebhookDestination

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_THE_MOVE = [("botadmin", "0003_field_labels"), ("feedback", "0003_delivery_pending_index")]


def _targets_before(graph, moved_apps_at):
    """Migration targets with botadmin and feedback at `moved_apps_at` and every other app at
    its newest migration that needs nothing newer of those two (later analytics migrations,
    for instance, depend on the state after the move)."""
    moved = dict(moved_apps_at)
    allowed = {app: set(graph.forwards_plan((app, name))) for app, name in moved_apps_at}

    def needs_newer(node):
        return any(n[0] in moved and n not in allowed[n[0]] for n in graph.forwards_plan(node))

    targets = list(moved_apps_at)
    for node in graph.leaf_nodes():
        if node[0] in moved:
            continue
        while needs_newer(node):
            (node,) = [p for p in graph.node_map[node].parents if p[0] == node[0]]
        targets.append(node)
    return targets


def _migrate(moved_apps_at=None):
    """Migrate the test database to the latest migrations, except botadmin and feedback at
    `moved_apps_at` when given, and return the historical apps of that state."""
    executor = MigrationExecutor(connection)
    targets = executor.loader.graph.leaf_nodes()
    if moved_apps_at:
        targets = _targets_before(executor.loader.graph, moved_apps_at)
    executor.migrate(targets)
    executor.loader.build_graph()
    ContentType.objects.clear_cache()
    return executor.loader.project_state(targets).apps


def test_destinations_and_the_rows_that_point_at_them_survive_the_move_to_feedback():
    old = _migrate(BEFORE_THE_MOVE)
    try:
        OldDestination = old.get_model("botadmin", "WebhookDestination")
        team = old.get_model("botadmin", "Team").objects.create(name="Support")
        bot = old.get_model("botadmin", "Bot").objects.create(app_id="cli_moved", name="Moved")
        destination = OldDestination.objects.create(
            name="ops",
            url="https://hooks.example.com/ops",
            event_types=["turn.completed", "feedback.revised"],
            timeout_ms=2500,
            include_comment=True,
            secret_ref="sec_current",
            disabled_reason="",
        )
        destination.teams.add(team)
        destination.bots.add(bot)
        OldDestination.objects.create(name="everyone", url="https://hooks.example.com/all")
        event = old.get_model("feedback", "Event").objects.create(
            event_id="evt_moved", type="turn.completed", body="{}"
        )
        item = old.get_model("feedback", "OutboxItem").objects.create(
            event=event, destination=destination, body="{}", status="done"
        )
        old.get_model("feedback", "WebhookAttempt").objects.create(
            outbox_item=item,
            destination=destination,
            attempt=1,
            status_code=200,
            outcome="delivered",
        )
        old.get_model("botadmin", "AuditEntry").objects.create(
            action="webhook_destination.created",
            target_type="botadmin.webhookdestination",
            target_id=str(destination.pk),
            target_repr="ops",
        )
        OldContentType = old.get_model("contenttypes", "ContentType")
        old_type = OldContentType.objects.get(app_label="botadmin", model="webhookdestination")
        grant = old.get_model("auth", "Permission").objects.get(
            content_type=old_type, codename="change_webhookdestination"
        )
        editors = old.get_model("auth", "Group").objects.create(name="webhook editors")
        editors.permissions.add(grant)
        destination_pk, item_pk, type_pk = destination.pk, item.pk, old_type.pk
    finally:
        _migrate()

    moved = WebhookDestination.objects.get(pk=destination_pk)
    assert moved._meta.db_table == "botadmin_webhookdestination"
    assert (moved.name, moved.url, moved.timeout_ms, moved.include_comment) == (
        "ops",
        "https://hooks.example.com/ops",
        2500,
        True,
    )
    assert moved.event_types == ["turn.completed", "feedback.revised"]
    assert moved.secret_ref == "sec_current"
    assert list(moved.teams.all()) == [Team.objects.get(name="Support")]
    assert list(moved.bots.all()) == [Bot.objects.get(app_id="cli_moved")]
    assert list(WebhookDestination.objects.values_list("name", flat=True)) == ["everyone", "ops"]
    assert OutboxItem.objects.get(pk=item_pk).destination == moved
    assert list(moved.outbox_items.values_list("pk", flat=True)) == [item_pk]
    assert WebhookAttempt.objects.get().destination == moved
    assert list(Team.objects.get(name="Support").webhook_destinations.all()) == [moved]

    # the content type moved (same id), so the permissions and the grants of them stayed
    content_type = ContentType.objects.get_for_model(WebhookDestination)
    assert content_type.pk == type_pk
    assert content_type.app_label == "feedback"
    assert not ContentType.objects.filter(app_label="botadmin", model="webhookdestination").exists()
    editor = User.objects.create_user("editor")
    editor.groups.add(Group.objects.get(name="webhook editors"))
    assert editor.has_perm("feedback.change_webhookdestination")
    assert Permission.objects.filter(content_type=content_type).count() == 4

    # the destination's audit history reads under the label new entries get
    entry = AuditEntry.objects.get(action="webhook_destination.created")
    assert entry.target_type == "feedback.webhookdestination" == moved._meta.label_lower


def test_deliveries_keep_the_chat_they_were_sent_to_and_are_linked_to_an_existing_chat():
    """`0007_delivery_chat_link` fills `sent_chat_id` from each delivery's frozen snapshot and
    links a delivery made before its chat had a row to the chat that has one now."""
    from feedback.models import Delivery

    old = _migrate([("feedback", "0005_review_alert_events_content_ref")])
    try:
        bot = old.get_model("botadmin", "Bot").objects.create(app_id="cli_link", name="Link")
        Chat = old.get_model("botadmin", "Chat")
        OldDelivery = old.get_model("feedback", "Delivery")
        known = Chat.objects.create(chat_id="oc_known")
        Chat.objects.create(chat_id="oc_later")
        rows = {
            "del_linked": ("oc_known", known),
            "del_unlinked": ("oc_later", None),
            "del_nowhere": ("oc_nowhere", None),
        }
        for delivery_id, (chat_id, chat) in rows.items():
            OldDelivery.objects.create(
                delivery_id=delivery_id, bot=bot, chat=chat, policy_snapshot={"chat_id": chat_id}
            )
        OldDelivery.objects.create(delivery_id="del_no_snapshot", bot=bot, policy_snapshot=None)
    finally:
        _migrate()

    found = {
        d.delivery_id: (d.sent_chat_id, d.chat.chat_id if d.chat else None)
        for d in Delivery.objects.select_related("chat")
    }
    assert found == {
        "del_linked": ("oc_known", "oc_known"),
        "del_unlinked": ("oc_later", "oc_later"),
        "del_nowhere": ("oc_nowhere", None),
        "del_no_snapshot": ("", None),
    }


def test_deliveries_made_before_channels_were_recorded_are_feishu_and_ratings_still_count():
    """`0008_delivery_channel` adds the column without rebuilding the table (the analytics
    rating-count triggers on feedback_latestfeedback survive): a delivery made before it reads
    as `feishu`, and rating it afterwards still moves its rollup row."""
    from analytics.models import DeliveryRatingCounts
    from feedback.models import Delivery, LatestFeedback, Revision

    old = _migrate([("feedback", "0007_delivery_chat_link")])
    try:
        bot = old.get_model("botadmin", "Bot").objects.create(app_id="cli_chan", name="Chan")
        old.get_model("feedback", "Delivery").objects.create(
            delivery_id="del_before_channels", bot=bot, policy_snapshot={}
        )
    finally:
        _migrate()

    delivery = Delivery.objects.get(delivery_id="del_before_channels")
    assert delivery.channel == "feishu"
    revision = Revision.objects.create(
        revision_id="fb_chan",
        delivery=delivery,
        operator_open_id="ou_x",
        revision=1,
        verdict_key="good",
        semantic="positive",
        callback_key="cb_chan",
    )
    LatestFeedback.objects.create(
        delivery=delivery,
        operator_open_id="ou_x",
        revision=revision,
        semantic="positive",
        verdict_key="good",
        updated_at=revision.created_at,
    )
    counts = DeliveryRatingCounts.objects.get(delivery=delivery)
    assert counts.positive == 1
