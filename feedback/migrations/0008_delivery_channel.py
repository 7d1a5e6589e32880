from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('feedback', '0007_delivery_chat_link'),
    ]

    operations = [
        # One ALTER TABLE … ADD COLUMN instead of Django's AddField, as in 0005 and 0007: on
        # SQLite AddField rebuilds feedback_delivery, which analytics' rollup triggers forbid.
        # Every delivery before this one was sent on Feishu, the column's database default.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name='delivery',
                    name='channel',
                    field=models.CharField(choices=[('feishu', 'Feishu'), ('slack', 'Slack')], default='feishu', help_text='The channel the answer was sent on.', max_length=12, verbose_name='channel'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql='ALTER TABLE "feedback_delivery" ADD COLUMN "channel" varchar(12) NOT NULL DEFAULT \'feishu\'',
                    reverse_sql='ALTER TABLE "feedback_delivery" DROP COLUMN "channel"',
                ),
            ],
        ),
    ]
