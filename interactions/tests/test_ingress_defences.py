"""Defence in depth at `POST /lark/<app_id>/callback`: a token Cardloop cannot even compare (a
lone surrogate) is one warning line, the body's `header.app_id` must name the URL's bot, a
signed callback must still carry the Verification Token, the url_verification answer is JSON
built from the parsed challenge, and a card action missing its `context` says so in the log."""

from __future__ import annotations

import json
import logging

import pytest

from interactions.callbacks import registry
from interactions.models import InboundEvent
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)

SURROGATE = "vt_\ud83d"


def _json(response):
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


def _escaped(payload) -> bytes:
    # ensure_ascii: a lone surrogate goes out as a `\\udXXX` escape, as a sender could write it
    return json.dumps(payload).encode("ascii")


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize(
    "shape",
    ["header", "legacy", "challenge"],
)
def test_lone_surrogate_token_is_400_with_one_warning_line_and_no_traceback(
    lark_callback, register_card_handler, caplog, encrypt, shape
):
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    if shape == "header":
        payload = feishu.payload("card_action_feedback_click", {"header.token": SURROGATE})
    elif shape == "legacy":
        payload = {"uuid": "u1", "token": SURROGATE, "event": {"type": "message"}}
    else:
        payload = feishu.payload("url_verification", {"token": SURROGATE})
    raw = _escaped(payload)
    with caplog.at_level(logging.DEBUG):
        response = lark_callback(raw, encrypt=encrypt)
    assert response.status_code == 400
    assert _json(response)["error"] == "malformed_payload"
    assert [r for r in caplog.records if r.exc_info] == []
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING and "token" in lines[0].getMessage()
    assert calls == [] and not InboundEvent.objects.exists()


def test_signed_callback_for_another_app_id_is_refused_and_nothing_is_written(
    lark_callback, register_card_handler
):
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    payload = feishu.payload("card_action_feedback_click", {"header.app_id": "cli_other_app"})
    response = lark_callback(payload)
    assert response.status_code == 401
    assert _json(response)["error"] == "app_id_mismatch"
    assert calls == [] and not InboundEvent.objects.exists()


def test_signed_callback_without_a_token_is_refused_when_the_bot_has_a_verification_token(
    lark_callback, register_card_handler
):
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    payload = feishu.payload("card_action_feedback_click")
    del payload["header"]["token"]
    response = lark_callback(payload)
    assert response.status_code == 401
    assert _json(response)["error"] == "missing_token"
    assert calls == [] and not InboundEvent.objects.exists()


def test_signed_callback_with_the_token_and_its_own_app_id_is_still_answered(
    lark_callback, register_card_handler
):
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 200 and _json(response)["toast"]["type"] == "success"


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_url_verification_answer_is_json_of_the_challenge_even_with_quotes_in_it(
    lark_callback, encrypt
):
    challenge = 'a"b\\c","extra":"x'
    response = lark_callback(
        feishu.payload("url_verification", {"challenge": challenge}), encrypt=encrypt
    )
    assert response.status_code == 200
    assert _json(response) == {"challenge": challenge}


def test_url_verification_without_a_string_challenge_is_400(lark_callback):
    response = lark_callback(feishu.payload("url_verification", {"challenge": {"x": 1}}))
    assert response.status_code == 400
    assert _json(response)["error"] == "malformed_payload"


def test_card_action_without_context_logs_the_missing_field(
    lark_callback, register_card_handler, caplog
):
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    payload = feishu.payload("card_action_feedback_click")
    del payload["event"]["context"]
    with caplog.at_level(logging.INFO):
        response = lark_callback(payload)
    assert response.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("event.context.open_message_id" in line for line in lines), lines
    assert all("ou_requester" not in line for line in lines)
