"""`WebhookDestination` moves from `botadmin` to `feedback`, next to its service
(`feedback/destinations.py`), its admin and the outbox. State only: the table keeps its name
(`botadmin_webhookdestination`, set as `db_table`) and its rows, and so do the two many-to-many
tables (`botadmin_webhookdestination_teams` / `_bots`, named after the table) and the foreign
keys of outbox rows and attempt-log rows, which already point at that table.

Besides the schema state, two rows that name the model's app are relabelled so nothing is lost:
- the content type `botadmin.webhookdestination` becomes `feedback.webhookdestination`, so the
  permissions (and the users' and groups' grants of them) and the admin's history entries,
  which point at the content type's id, stay attached;
- audit entries about destinations (`target_type` "botadmin.webhookdestination") take the new
  label, the one `botadmin.audit.record` writes from now on, so one destination's history reads
  under one type.
Both steps are reversed when migrating back.
"""

import django.db.models.deletion
from django.db import migrations, models

OLD, NEW = "botadmin", "feedback"
MODEL = "webhookdestination"


def _relabel(apps, schema_editor, old: str, new: str) -> None:
    db = schema_editor.connection.alias
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(db)
    moved = content_types.filter(app_label=old, model=MODEL).first()
    if moved is not None:
        # A content type under the new label can only be one `post_migrate` made while the
        # database was migrated back (with its default permissions, granted to nobody yet):
        # the moved one, which the grants and history point at, replaces it.
        content_types.filter(app_label=new, model=MODEL).delete()
        moved.app_label = new
        moved.save(update_fields=["app_label"])
    audit = apps.get_model("botadmin", "AuditEntry").objects.using(db)
    audit.filter(target_type=f"{old}.{MODEL}").update(target_type=f"{new}.{MODEL}")


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, OLD, NEW)


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("botadmin", "0003_field_labels"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("feedback", "0003_delivery_pending_index"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="WebhookDestination",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True, verbose_name="name")),
                        ("url", models.URLField(max_length=2000, verbose_name="URL")),
                        ("enabled", models.BooleanField(default=True, verbose_name="enabled")),
                        ("event_types", models.JSONField(default=list, verbose_name="event types")),
                        (
                            "timeout_ms",
                            models.PositiveIntegerField(
                                default=10000,
                                help_text="100–30000 ms per attempt.",
                                verbose_name="timeout (ms)",
                            ),
                        ),
                        (
                            "include_comment",
                            models.BooleanField(
                                default=False,
                                help_text="Send feedback comment text in feedback.revised. Off by default.",
                                verbose_name="include comment text",
                            ),
                        ),
                        (
                            "secret_ref",
                            models.CharField(
                                blank=True, editable=False, max_length=80, verbose_name="secret ref"
                            ),
                        ),
                        (
                            "previous_secret_ref",
                            models.CharField(
                                blank=True,
                                editable=False,
                                max_length=80,
                                verbose_name="previous secret ref",
                            ),
                        ),
                        (
                            "previous_secret_expires_at",
                            models.DateTimeField(
                                blank=True,
                                editable=False,
                                null=True,
                                verbose_name="previous secret expires at",
                            ),
                        ),
                        (
                            "disabled_reason",
                            models.CharField(blank=True, max_length=200, verbose_name="disabled reason"),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                        ("updated_at", models.DateTimeField(auto_now=True, verbose_name="updated at")),
                        (
                            "bots",
                            models.ManyToManyField(
                                blank=True,
                                related_name="webhook_destinations",
                                to="botadmin.bot",
                                verbose_name="bots",
                            ),
                        ),
                        (
                            "teams",
                            models.ManyToManyField(
                                blank=True,
                                related_name="webhook_destinations",
                                to="botadmin.team",
                                verbose_name="teams",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "webhook destination",
                        "verbose_name_plural": "webhook destinations",
                        "db_table": "botadmin_webhookdestination",
                        "ordering": ["name"],
                    },
                ),
                migrations.AlterField(
                    model_name="outboxitem",
                    name="destination",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="outbox_items",
                        to="feedback.webhookdestination",
                        verbose_name="destination",
                    ),
                ),
                migrations.AlterField(
                    model_name="webhookattempt",
                    name="destination",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempts",
                        to="feedback.webhookdestination",
                        verbose_name="destination",
                    ),
                ),
            ],
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
