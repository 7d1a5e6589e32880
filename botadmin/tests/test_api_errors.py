"""Bodies no parser should choke on: every API path answers them in the `{"error", "detail"}`
shape with a 4xx, with DEBUG on (make run) and off."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.fixture(params=[False, True], ids=["production", "debug"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def test_body_over_the_upload_limit_is_413_json(bot_client, settings, debug):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    bot_client.raise_request_exception = False
    body = '{"chat_id": "' + "x" * 4096 + '"}'
    response = bot_client.post("/api/v1/deliveries", data=body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == "too_large"
    assert "1024" in response.json()["detail"]


def test_deeply_nested_json_is_a_400_parse_error(bot_client, debug):
    bot_client.raise_request_exception = False
    body = '{"card": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = bot_client.post("/api/v1/deliveries", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


@pytest.mark.parametrize(
    ("language", "sentence"),
    [("en", "The request body is not valid JSON: "), ("zh-hans", "请求正文不是有效的 JSON：")],
)
def test_a_body_that_is_not_json_is_a_400_in_the_readers_language(bot_client, language, sentence):
    # DRF's own "JSON parse error - …" is not marked for translation
    response = bot_client.post(
        "/api/v1/deliveries",
        data='{"card": ',
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "bad_request"
    assert body["detail"].startswith(sentence)
    assert "line 1" in body["detail"]  # the decoder's locator is kept


def test_callback_body_over_the_upload_limit_is_413_json(client, lark_bot, settings, debug):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    client.raise_request_exception = False
    response = client.post(
        f"/lark/{lark_bot.app_id}/callback",
        data='{"encrypt": "' + "x" * 4096 + '"}',
        content_type="application/json",
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"] == "too_large"


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        ("permission", 403, "forbidden"),
        ("suspicious", 400, "bad_request"),
        ("crash", 500, "server_error"),
    ],
)
def test_plain_django_api_view_errors_keep_the_json_shape_in_debug(
    client, lark_bot, settings, monkeypatch, raised, status, code
):
    # /lark/ is a plain Django view, outside DRF's exception handler.
    from django.core.exceptions import PermissionDenied, SuspiciousOperation

    from interactions.channels.feishu import ingress

    errors = {
        "permission": PermissionDenied("no"),
        "suspicious": SuspiciousOperation("odd"),
        "crash": RuntimeError("boom"),
    }

    def broken(bot, body, headers):
        raise errors[raised]

    monkeypatch.setattr(ingress, "process", broken)
    settings.DEBUG = True
    client.raise_request_exception = False
    response = client.post(
        f"/lark/{lark_bot.app_id}/callback", data={}, content_type="application/json"
    )
    assert response.status_code == status
    assert response.json()["error"] == code


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/sessions/a%00b/progress",
        "/api/v1/asks/ask_%00",
        "/api/v1/interactions/ia_%00",
        "/api/v1/desktop-tokens?open_id=ou_%00",
        "/lark/cli_%00/callback",
    ],
)
def test_nul_in_the_url_is_a_400_naming_it(bot_client, url):
    # PostgreSQL text cannot hold NUL: such a path segment or query value reached a lookup
    # and failed there with DataError (500). Bodies are covered by the serializers.
    response = bot_client.get(url, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 400, response.content
    assert response.json() == {
        "error": "bad_request",
        "detail": "The URL must not contain NUL (%00) characters.",
    }
    # checked above LocaleMiddleware, still in the reader's language
    chinese = bot_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert chinese.json()["detail"] == "URL 中不能包含 NUL（%00）字符。"


def test_nul_in_an_admin_search_is_a_400(admin_client):
    response = admin_client.get("/admin/feedback/delivery/?q=%00")
    assert response.status_code == 400


@pytest.mark.parametrize(
    "path", ["/api/v1/deliveries", "/api/v1/nowhere", "/healthz", "/lark/cli_x/events"]
)
def test_disallowed_host_on_api_paths_is_400_json_with_one_log_line_and_no_traceback(
    bot_client, debug, caplog, path
):
    bot_client.raise_request_exception = False
    with caplog.at_level("WARNING"):
        response = bot_client.get(path, HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {
        "error": "disallowed_host",
        "detail": "The Host header is not allowed.",
    }
    records = [r for r in caplog.records if r.name == "django.security.DisallowedHost"]
    assert len(records) == 1
    assert records[0].exc_info is None and records[0].exc_text is None
    assert "Traceback" not in caplog.text


def test_disallowed_host_on_a_page_keeps_djangos_html_answer(client, debug):
    client.raise_request_exception = False
    response = client.get("/admin/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")


def test_suspicious_request_in_a_plain_api_view_is_400_json_in_production(
    client, lark_bot, settings, monkeypatch
):
    # Outside DEBUG Django answers a SuspiciousOperation with its HTML handler400 page.
    from django.core.exceptions import SuspiciousOperation

    from interactions.channels.feishu import ingress

    def broken(bot, body, headers):
        raise SuspiciousOperation("odd")

    monkeypatch.setattr(ingress, "process", broken)
    settings.DEBUG = False
    client.raise_request_exception = False
    response = client.post(
        f"/lark/{lark_bot.app_id}/callback", data={}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json() == {"error": "bad_request", "detail": "Bad request."}


def test_a_crash_in_a_plain_api_view_is_logged_once_with_its_traceback_in_debug(
    client, lark_bot, settings, monkeypatch, caplog
):
    from interactions.channels.feishu import ingress

    def broken(bot, body, headers):
        raise RuntimeError("boom")

    monkeypatch.setattr(ingress, "process", broken)
    settings.DEBUG = True
    client.raise_request_exception = False
    with caplog.at_level("ERROR"):
        response = client.post(
            f"/lark/{lark_bot.app_id}/callback", data={}, content_type="application/json"
        )
    assert response.status_code == 500
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info and isinstance(errors[0].exc_info[1], RuntimeError)


def _delivery_body(card_text: str, usage: dict | None = None) -> str:
    """A delivery request as JSON text; json.dumps writes a lone surrogate as a `\\udXXX`
    escape (ensure_ascii), exactly as a client might send it."""
    import json

    return json.dumps(
        {
            "chat_id": "oc_x",
            "requester_open_id": "ou_r",
            "response_kind": "final",
            "session_id": "s",
            "turn_id": "t",
            "card": {
                "schema": "2.0",
                "body": {"elements": [{"tag": "markdown", "content": card_text}]},
            },
            "usage": usage,
        }
    )


@pytest.mark.parametrize(
    ("card_text", "usage"),
    [
        ("x\ud800y", None),  # a lone high surrogate in the card's text
        ("x\udfff", None),
        ("x\x00y", None),
        ("ok", {"note": "\ud83d"}),  # a JSON field that is stored
        ("ok", {"note\x00": 1}),
    ],
    ids=["card-high", "card-low", "card-nul", "usage-surrogate", "usage-nul-key"],
)
def test_nul_or_lone_surrogate_anywhere_in_an_api_body_is_a_400_and_nothing_is_written(
    bot_client, debug, card_text, usage
):
    from feedback.models import Delivery

    bot_client.raise_request_exception = False
    body = _delivery_body(card_text, usage)
    response = bot_client.post("/api/v1/deliveries", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"
    assert "surrogate" in response.json()["detail"]
    assert not Delivery.objects.exists()


def test_a_valid_surrogate_pair_is_one_character_and_accepted(bot_client):
    body = _delivery_body("ok \ud83d\ude00", {"n": "\U0001f600"})
    assert "\\ud83d\\ude00" in body  # sent as an escaped pair
    response = bot_client.post("/api/v1/deliveries", data=body, content_type="application/json")
    assert response.status_code == 201, response.content


def test_django_log_lines_go_through_the_root_handler_only():
    """With DEBUG on, Django's default config added a console handler to the "django" logger
    beside the root one: a refused Host (and every django.* line) was printed twice."""
    import logging

    assert logging.getLogger("django").handlers == []
    assert logging.getLogger("django.security.DisallowedHost").handlers == []
    assert logging.getLogger().handlers


@pytest.mark.parametrize(
    ("language", "too_large", "unavailable", "busy"),
    [
        ("en", "larger than 1024 bytes", "database is unavailable", "busy right now"),
        ("zh-hans", "超过 1024 字节", "数据库暂时不可用", "当前繁忙"),
    ],
)
def test_size_and_database_refusals_are_told_in_the_readers_language(
    bot_client, settings, language, too_large, unavailable, busy
):
    from django.utils import translation

    from plumbing.api import busy_body, database_unavailable_body

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    body = '{"chat_id": "' + "x" * 4096 + '"}'
    response = bot_client.post(
        "/api/v1/deliveries",
        data=body,
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE=language,
    )
    assert response.status_code == 413 and too_large in response.json()["detail"]
    with translation.override(language):
        assert unavailable in database_unavailable_body()["detail"]
        assert busy in busy_body()["detail"]
