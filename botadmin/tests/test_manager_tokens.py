"""Manager API tokens: shown once, stored as a hash, prefix-only in the admin, revocable with an
audit entry; and keys of DRF's earlier `authtoken` table keep working after the migration."""

from __future__ import annotations

import hashlib
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from botadmin import services
from botadmin.models import AuditEntry, ManagerToken

SUMMARY = "/api/v1/analytics/summary?from=2025-03-10&to=2025-03-11&tz=UTC"
MIGRATION = ("botadmin", "0006_managertoken")


def api_get(header: str, path: str = SUMMARY):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client.get(path)


@pytest.fixture
def boss(db):
    """A superuser: reads every team's analytics, so a token of theirs gets 200."""
    return get_user_model().objects.create_superuser("boss", password="x")


def test_issued_token_is_stored_only_as_its_hash_and_authenticates_as_its_user(boss):
    raw, token = services.issue_manager_token("test", boss, "report script")

    assert raw.startswith(f"cmk_{token.lookup}_")
    row = ManagerToken.objects.get(pk=token.pk)
    assert row.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    stored = [str(v) for v in ManagerToken.objects.filter(pk=token.pk).values().first().values()]
    assert not any(raw in value for value in stored)
    assert api_get(f"Token {raw}").status_code == 200
    assert api_get(f"Bearer {raw}").status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None
    entry = AuditEntry.objects.get(action="managertoken.issued")
    assert entry.after == {
        "user": "boss",
        "token": f"cmk_{token.lookup}_…",
        "label": "report script",
    }
    assert raw not in str(entry.after) and raw not in entry.target_repr


def test_revoked_token_gets_401_and_the_revocation_is_audited(boss):
    raw, token = services.issue_manager_token("test", boss)
    services.revoke_manager_token(boss, token)
    services.revoke_manager_token(boss, token)  # idempotent: one audit entry

    response = api_get(f"Token {raw}")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    entries = AuditEntry.objects.filter(action="managertoken.revoked")
    assert entries.count() == 1
    assert entries[0].actor == boss
    assert entries[0].before["revoked_at"] is None and entries[0].after["revoked_at"]


def test_wrong_or_foreign_tokens_are_refused(boss, make_bot, make_api_key):
    raw, token = services.issue_manager_token("test", boss)
    assert api_get(f"Token {raw[:-1]}x").status_code == 401
    assert api_get("Token cmk_nothing_here").status_code == 401
    bot_key, _ = make_api_key(make_bot())
    assert api_get(f"Token {bot_key}").status_code == 401
    assert api_get(f"Bearer {bot_key}").status_code == 401  # a bot key reads no analytics
    boss.is_active = False
    boss.save()
    assert api_get(f"Token {raw}").status_code == 401


def test_admin_shows_the_token_once_and_afterwards_only_its_prefix(staff, boss):
    response = staff.post(
        reverse("admin:botadmin_managertoken_add"), {"user": boss.pk, "label": "cron"}
    )
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    token = ManagerToken.objects.get()
    page = response.content.decode()
    raw = re.search(rf"cmk_{token.lookup}_[A-Za-z0-9_-]{{30,}}", page).group(0)
    assert api_get(f"Token {raw}").status_code == 200

    listing = staff.get(reverse("admin:botadmin_managertoken_changelist")).content.decode()
    detail = staff.get(
        reverse("admin:botadmin_managertoken_change", args=[token.pk])
    ).content.decode()
    for html in (listing, detail):
        assert f"cmk_{token.lookup}_…" in html
        assert raw not in html and token.token_hash not in html

    staff.post(reverse("admin:botadmin_managertoken_change", args=[token.pk]), {"_revoke": "1"})
    assert api_get(f"Token {raw}").status_code == 401
    assert AuditEntry.objects.filter(action="managertoken.revoked").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_drf_token_still_authenticates_after_the_migration_and_its_key_is_gone():
    executor = MigrationExecutor(connection)
    parents = [
        key for key in executor.loader.graph.node_map[MIGRATION].parents if key[0] == "botadmin"
    ]
    executor.migrate([p.key for p in parents])
    try:
        old = executor.loader.project_state(
            [p.key for p in parents] + [("authtoken", "0004_alter_tokenproxy_options")]
        ).apps
        User = old.get_model("auth", "User")
        Token = old.get_model("authtoken", "Token")
        manager = User.objects.create(username="old-script-owner", is_superuser=True)
        key = "0123456789abcdef0123456789abcdef01234567"  # DRF's form: 40 hex characters
        Token.objects.create(key=key, user=manager)
        other = User.objects.create(username="other-owner", is_superuser=True)
        Token.objects.create(key="short", user=other)  # too short to keep: not carried over
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    response = api_get(f"Token {key}")
    assert response.status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0  # no full key is stored any more
    token = ManagerToken.objects.get()
    assert token.legacy and token.lookup == key[:12]
    assert token.token_hash == hashlib.sha256(key.encode()).hexdigest()
    assert services.manager_token_prefix(token) == f"{key[:12]}…"
    entry = AuditEntry.objects.get(action="managertoken.migrated")
    assert key not in str(entry.after) and entry.after["token"] == f"{key[:12]}…"
    assert api_get("Token short").status_code == 401
    services.revoke_manager_token("test", token)
    assert api_get(f"Token {key}").status_code == 401


def test_a_token_and_its_user_are_read_in_one_query(boss, django_assert_num_queries):
    from rest_framework.test import APIRequestFactory

    from botadmin.auth import ManagerTokenAuthentication

    raw, token = services.issue_manager_token("test", boss, "report script")
    ManagerToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())  # no touch
    request = APIRequestFactory().get(SUMMARY, HTTP_AUTHORIZATION=f"Token {raw}")
    with django_assert_num_queries(1):
        user, row = ManagerTokenAuthentication().authenticate(request)
    assert user == boss and row.pk == token.pk


def test_a_bot_key_and_its_bot_are_read_in_one_query(
    make_bot, make_api_key, django_assert_num_queries
):
    from rest_framework.test import APIRequestFactory

    from botadmin.auth import BotApiKeyAuthentication
    from botadmin.models import BotApiKey

    bot = make_bot()
    raw, key = make_api_key(bot)
    BotApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    request = APIRequestFactory().get("/api/v1/events", HTTP_AUTHORIZATION=f"Bearer {raw}")
    with django_assert_num_queries(1):
        principal, row = BotApiKeyAuthentication().authenticate(request)
    assert principal.bot == bot and row.pk == key.pk
