"""`WebhookDestination` now lives in `feedback` (see feedback's migration 0004): it leaves
botadmin's migration state only; its table, many-to-many tables and rows stay as they are."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("botadmin", "0003_field_labels"),
        ("feedback", "0004_webhookdestination_from_botadmin"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[migrations.DeleteModel(name="WebhookDestination")],
        ),
    ]
