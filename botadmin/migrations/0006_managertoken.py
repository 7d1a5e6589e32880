"""Manager API tokens, stored hashed; the keys of DRF's `authtoken` table move into them.

DRF stored and showed each key in full. `hash_drf_keys` stores each key's SHA-256 as a
`ManagerToken` (`legacy=True`, lookup = its first 12 characters, the rest stays secret),
records `managertoken.migrated` in the audit log (prefix only) and deletes the DRF row, so
the key keeps authenticating (`Authorization: Token <key>`) and is no longer stored. Keys
shorter than 24 characters (DRF made 40) are not carried over: too short to stay secret.
Reversing drops the new table; the DRF rows are gone by then (their keys were never kept).
"""

import hashlib

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


#: Same rule as `botadmin.models.legacy_lookup` (a migration never imports live models).
LOOKUP_LENGTH = 12
MIN_LENGTH = 24


def hash_drf_keys(apps, schema_editor):
    Token = apps.get_model("authtoken", "Token")
    ManagerToken = apps.get_model("botadmin", "ManagerToken")
    AuditEntry = apps.get_model("botadmin", "AuditEntry")
    db = schema_editor.connection.alias
    for old in Token.objects.using(db).select_related("user").order_by("created"):
        key = old.key
        if len(key) >= MIN_LENGTH and key.isascii() and key.isalnum():
            token = ManagerToken.objects.using(db).create(
                user=old.user,
                label="migrated",
                lookup=key[:LOOKUP_LENGTH],
                token_hash=hashlib.sha256(key.encode("utf-8")).hexdigest(),
                legacy=True,
            )
            # keep the DRF token's age (auto_now_add set "now" on create)
            ManagerToken.objects.using(db).filter(pk=token.pk).update(created_at=old.created)
            AuditEntry.objects.using(db).create(
                actor_repr="migration",
                action="managertoken.migrated",
                target_type="botadmin.managertoken",
                target_id=str(token.pk),
                target_repr=f"{token.lookup}… (migrated)",
                before=None,
                after={"user": old.user.username, "token": f"{token.lookup}…"},
            )
        old.delete()


class Migration(migrations.Migration):

    dependencies = [
        ('botadmin', '0005_bot_card_language'),
        ("authtoken", "0004_alter_tokenproxy_options"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ManagerToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('label', models.CharField(blank=True, max_length=100, verbose_name='label')),
                ('lookup', models.CharField(editable=False, max_length=16, unique=True, verbose_name='key prefix')),
                ('token_hash', models.CharField(editable=False, max_length=64, verbose_name='token hash')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('last_used_at', models.DateTimeField(blank=True, editable=False, null=True, verbose_name='last used')),
                ('revoked_at', models.DateTimeField(blank=True, editable=False, null=True, verbose_name='revoked at')),
                ('legacy', models.BooleanField(default=False, editable=False, help_text='Migrated from a key of the earlier token table (no cmk_ prefix).', verbose_name='migrated key')),
                ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='created by')),
                ('user', models.ForeignKey(help_text='The token acts as this user: their teams, their reviewer permissions.', on_delete=django.db.models.deletion.CASCADE, related_name='manager_tokens', to=settings.AUTH_USER_MODEL, verbose_name='user')),
            ],
            options={
                'verbose_name': 'manager API token',
                'verbose_name_plural': 'manager API tokens',
                'ordering': ['-created_at'],
            },
        ),
        migrations.RunPython(hash_drf_keys, migrations.RunPython.noop),
    ]
