"""Health probes and configuration checks."""

import pytest
from django.core.checks import run_checks
from django.test import override_settings


def test_healthz_answers_json_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


# transactional: on SQLite the probe takes the write lock from a connection of its own, which
# a test's open transaction would hold
@pytest.mark.django_db(transaction=True)
def test_readyz_reports_database_and_channel_layer(client):
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["channel_layer"]["ok"] is True


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_when_the_channel_layer_is_unreachable(client):
    layers = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    from channels.layers import channel_layers

    with override_settings(CHANNEL_LAYERS=layers):
        channel_layers.backends.clear()
        try:
            response = client.get("/readyz")
        finally:
            channel_layers.backends.clear()
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["channel_layer"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True


def _ids():
    return {m.id for m in run_checks()}


@pytest.mark.parametrize(
    "key",
    ["missing", "django-insecure-abc" + "x" * 60, "short", "a" * 60],
)
def test_production_refuses_a_missing_or_weak_secret_key(key):
    from django.conf import settings

    key = settings.MISSING_SECRET_KEY if key == "missing" else key
    with override_settings(DEBUG=False, SECRET_KEY=key):
        assert "cardloop.E001" in _ids()


def test_the_missing_key_error_tells_a_developer_to_set_django_debug():
    # manage.py commands in a second shell without DJANGO_DEBUG hit this check first
    from django.conf import settings

    with override_settings(DEBUG=False, SECRET_KEY=settings.MISSING_SECRET_KEY):
        (error,) = [m for m in run_checks() if m.id == "cardloop.E001"]
    assert "DJANGO_DEBUG=true" in error.hint and ".env" in error.hint


def test_production_accepts_a_real_secret_key():
    with override_settings(DEBUG=False, SECRET_KEY="Zq8-" + "v7Hk2LmN9pQrStUw" * 4):
        assert "cardloop.E001" not in _ids()


def test_debug_mode_allows_the_development_key():
    from django.conf import settings

    with override_settings(DEBUG=True, SECRET_KEY=settings.DEV_SECRET_KEY):
        assert "cardloop.E001" not in _ids()


def test_unknown_report_time_zone_is_an_error():
    with override_settings(CARDLOOP_REPORT_TZ="Mars/Olympus"):
        assert "cardloop.E002" in _ids()


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/nonexistent", "/api/v2/deliveries", "/lark/"])
def test_unknown_api_path_is_a_json_404_also_in_debug(client, settings, debug, path):
    # make run serves with DEBUG on; a bot backend with a typo must still get the API's shape.
    settings.DEBUG = debug
    response = client.post(
        path, data="{}", content_type="application/json", HTTP_ACCEPT_LANGUAGE="en"
    )
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"error": "not_found", "detail": "No such resource."}
    chinese = client.post(
        path, data="{}", content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert chinese.json() == {"error": "not_found", "detail": "没有这个资源。"}


@pytest.mark.django_db
def test_unexpected_api_error_is_a_json_500_also_in_debug(bot_client, settings, monkeypatch):
    from feedback.event_views import EventFeedView

    # async like the handler it replaces: the URLconf (imported by the first request when
    # this test runs alone) marks the view async only when every handler is
    async def broken(self, request, *args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(EventFeedView, "get", broken)
    settings.DEBUG = True
    bot_client.raise_request_exception = False
    response = bot_client.get("/api/v1/events", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 500
    assert response.json() == {
        "error": "server_error",
        "detail": "Internal error; it has been logged.",
    }
