from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("botadmin", "0004_webhookdestination_to_feedback"),
    ]

    operations = [
        # ADD COLUMN with a constant default (valid on SQLite and PostgreSQL) instead of
        # AddField, which rebuilds the table on SQLite; the database default is never relied on.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="bot",
                    name="card_language",
                    field=models.CharField(
                        choices=[("zh-hans", "简体中文"), ("en", "English")],
                        default="zh-hans",
                        help_text=(
                            "Cards carry Cardloop's text in Chinese and English for each "
                            "reader's Feishu language; this one is shown where a reader's "
                            "language is neither."
                        ),
                        max_length=8,
                        verbose_name="card language",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=(
                        'ALTER TABLE "botadmin_bot" ADD COLUMN "card_language" varchar(8) '
                        "NOT NULL DEFAULT 'zh-hans'"
                    ),
                    reverse_sql='ALTER TABLE "botadmin_bot" DROP COLUMN "card_language"',
                ),
            ],
        ),
    ]
