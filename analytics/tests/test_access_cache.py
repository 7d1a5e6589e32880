"""The manager API's access cache (`botadmin.accesscache`): a token and its user's teams are
looked up once per process and `CARDLOOP_ACCESS_CACHE_SECONDS` instead of on every request, and
what takes access away still takes effect — at once in the process that made the change
(signals), within the cache's lifetime in any other (entries expire).

A change "made elsewhere" is written here without signals (`QuerySet.update`, a raw DELETE),
exactly what this process sees of another process's change; the caches' clock is moved past the
lifetime instead of sleeping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from botadmin import accesscache, services
from botadmin.models import ManagerToken, TeamMembership

RANGE = {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC"}
SUMMARY = "/api/v1/analytics/summary"


@pytest.fixture
def deliveries(make_delivery):
    """One delivery of team A, two of team B."""
    make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), team="a")
    make_delivery(at=datetime(2025, 3, 10, 2, tzinfo=UTC), team="b")
    make_delivery(at=datetime(2025, 3, 10, 3, tzinfo=UTC), team="b")


@pytest.fixture
def clock(monkeypatch):
    """The caches' clock, moved by hand: `clock.advance(seconds)`."""

    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

        def advance(self, seconds: float) -> None:
            self.now += seconds

    fake = Clock()
    monkeypatch.setattr(accesscache.MANAGER_TOKENS, "clock", fake)
    monkeypatch.setattr(accesscache.TEAM_IDS, "clock", fake)
    return fake


@pytest.fixture
def token_client(api, manager_of, world):
    """`token_client(*teams)` → (APIClient with a fresh manager token, user, token row)."""

    def make(*teams):
        user = manager_of(*teams)
        raw, token = services.issue_manager_token("test", user)
        client = api()
        client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
        client.raw_token = raw
        return client, user, token

    return make


def _delivered(client) -> int:
    response = client.get(SUMMARY, RANGE)
    assert response.status_code == 200, response.content
    return response.json()["current"]["delivered"]


def _access_queries(queries) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if "botadmin_managertoken" in q["sql"] or "botadmin_teammembership" in q["sql"]
    ]


def test_a_token_used_again_costs_no_token_or_membership_query(world, deliveries, token_client):
    client, _user, _token = token_client(world.team_a)
    with CaptureQueriesContext(connection) as first:
        assert _delivered(client) == 1
    assert len(_access_queries(first.captured_queries)) >= 2  # token (+ touch), teams
    with CaptureQueriesContext(connection) as again:
        assert _delivered(client) == 1
    assert _access_queries(again.captured_queries) == []


def test_a_revoked_token_is_refused_at_once_by_the_process_that_revoked_it(
    world, deliveries, token_client, settings
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 60  # invalidation, not expiry, refuses it
    client, _user, token = token_client(world.team_a)
    assert _delivered(client) == 1
    services.revoke_manager_token("test", token)
    response = client.get(SUMMARY, RANGE)
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"


def test_a_token_revoked_elsewhere_is_refused_once_the_cache_lifetime_has_passed(
    world, deliveries, token_client, settings, clock
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 1.0
    client, _user, token = token_client(world.team_a)
    assert _delivered(client) == 1
    ManagerToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())  # no signal
    clock.advance(0.5)
    assert client.get(SUMMARY, RANGE).status_code == 200  # this process's entry still lives
    clock.advance(0.5)
    assert client.get(SUMMARY, RANGE).status_code == 401
    clock.advance(5)
    assert client.get(SUMMARY, RANGE).status_code == 401  # a revoked token is never cached


def test_a_removed_membership_hides_the_team_at_once_in_the_process_that_removed_it(
    world, deliveries, token_client, settings
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 60
    client, user, _token = token_client(world.team_a, world.team_b)
    assert _delivered(client) == 3
    assert services.remove_team_member("test", world.team_b, user)
    assert _delivered(client) == 1
    assert services.remove_team_member("test", world.team_a, user)
    response = client.get(SUMMARY, RANGE)
    assert response.status_code == 403  # no team left: nothing to read
    services.add_team_member("test", world.team_b, user)
    assert _delivered(client) == 2


def test_a_membership_removed_elsewhere_hides_the_team_once_the_cache_lifetime_has_passed(
    world, deliveries, token_client, settings, clock
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 1.0
    client, user, _token = token_client(world.team_a, world.team_b)
    assert _delivered(client) == 3
    membership = TeamMembership.objects.get(user=user, team=world.team_b)
    table = connection.ops.quote_name(TeamMembership._meta.db_table)
    with connection.cursor() as cursor:  # no signal
        cursor.execute(f"DELETE FROM {table} WHERE id = %s", [membership.pk])  # noqa: S608
    clock.advance(0.5)
    assert _delivered(client) == 3  # this process's entry still lives
    clock.advance(0.5)
    assert _delivered(client) == 1


def test_a_membership_moved_to_another_user_leaves_the_first_user_at_once(
    world, deliveries, token_client, manager_of, settings
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 60
    client, user, _token = token_client(world.team_a, world.team_b)
    assert _delivered(client) == 3
    membership = TeamMembership.objects.get(user=user, team=world.team_b)
    membership.user = manager_of()
    membership.save()
    assert _delivered(client) == 1


def test_a_deactivated_user_is_refused_and_a_new_superuser_sees_everything_at_once(
    world, deliveries, token_client, settings, make_delivery
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 60
    make_delivery(at=datetime(2025, 3, 10, 4, tzinfo=UTC), team=None)
    client, user, _token = token_client(world.team_a)
    assert _delivered(client) == 1
    user.is_superuser = True
    user.save()
    assert _delivered(client) == 4  # every team, and deliveries with none
    user.is_active = False
    user.save()
    assert client.get(SUMMARY, RANGE).status_code == 401


def test_with_the_cache_off_every_request_looks_up_token_and_teams(
    world, deliveries, token_client, settings
):
    settings.CARDLOOP_ACCESS_CACHE_SECONDS = 0
    client, _user, _token = token_client(world.team_a)
    for _ in range(2):
        with CaptureQueriesContext(connection) as ctx:
            assert _delivered(client) == 1
        assert len(_access_queries(ctx.captured_queries)) >= 2
    assert len(accesscache.MANAGER_TOKENS) == 0 and len(accesscache.TEAM_IDS) == 0


def test_the_cache_holds_the_token_hash_never_the_raw_token(world, deliveries, token_client):
    client, _user, token = token_client(world.team_a)
    assert _delivered(client) == 1
    keys = list(accesscache.MANAGER_TOKENS._entries)
    assert keys == [token.token_hash]
    assert client.raw_token not in repr(accesscache.MANAGER_TOKENS._entries)


def test_callers_get_copies_and_use_is_recorded_once_a_minute(world, token_client):
    client, _user, token = token_client(world.team_a)
    first = ManagerToken.for_request(client.raw_token)
    first.label = "changed by one caller"
    first.user.username = "changed too"
    again = ManagerToken.for_request(client.raw_token)
    assert (again.label, again.user.username) == (token.label, token.user.username)
    assert again.last_used_at is not None
    with CaptureQueriesContext(connection) as ctx:  # used within the minute: no write
        ManagerToken.for_request(client.raw_token)
    assert ctx.captured_queries == []
    assert ManagerToken.for_request("cmk_nothing_here") is None
    assert ManagerToken.for_request("") is None
