"""`POST /lark/<app_id>/callback`: verification (URL challenge, signature), routing and JSON
answers (never a 500), dedupe at the transport (a repeated event is handled once), the callback
budget, and real-format fixtures — all through Django's test client with bodies encrypted and
signed exactly as Feishu does."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time

import pytest
from django.db import connections

from interactions.callbacks import registry
from interactions.lark.signing import seal, signature
from interactions.models import InboundEvent
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


def _recording_handler(answer=None):
    calls = []

    def handler(action):
        calls.append(action)
        return answer

    handler.calls = calls
    return handler


def _assert_json(response):
    assert response["Content-Type"] == "application/json"
    return json.loads(response.content)


# ---------------------------------------------------------------------------------------------
# URL verification (plain and encrypted) without signature headers, only with the right token
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_url_verification_answers_the_challenge_without_signature_headers(lark_callback, encrypt):
    body = feishu.payload("url_verification")
    response = lark_callback(body, encrypt=encrypt)
    assert response.status_code == 200
    assert _assert_json(response) == {"challenge": "ajls384kdjx98XX"}
    assert "HTTP_X_LARK_SIGNATURE" not in response.wsgi_request.META


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_url_verification_with_a_wrong_token_is_401_and_the_challenge_is_not_echoed(
    lark_callback, encrypt
):
    body = feishu.payload("url_verification", {"token": "not-the-token"})
    response = lark_callback(body, encrypt=encrypt)
    assert response.status_code == 401
    answer = _assert_json(response)
    assert answer["error"] == "invalid_token"
    assert "ajls384kdjx98XX" not in response.content.decode()


@pytest.mark.parametrize(
    "raw",
    [b'{"encrypt":"%%not-base64%%"}', b'{"encrypt":"AAAAAAAAAAAAAAAAAAAAAA=="}'],
    ids=["not-base64", "bad-ciphertext"],
)
def test_undecryptable_body_is_400_and_nothing_is_written(lark_callback, raw):
    response = lark_callback(raw, encrypt=False)  # signed, but the "encrypt" value is junk
    assert response.status_code == 400
    assert _assert_json(response)["error"] == "undecryptable"
    assert not InboundEvent.objects.exists()


def test_body_encrypted_with_another_key_is_400(lark_callback, lark_bot, client):
    body = feishu.payload("card_action_feedback_click")
    raw, headers = seal(body, encrypt_key="some-other-key")
    # re-sign with the right key so only the decryption can fail
    headers["X-Lark-Signature"] = signature(
        headers["X-Lark-Request-Timestamp"],
        headers["X-Lark-Request-Nonce"],
        feishu.ENCRYPT_KEY,
        raw,
    )
    response = feishu.post_callback(client, lark_bot.app_id, body, sealed=(raw, headers))
    assert response.status_code == 400
    assert _assert_json(response)["error"] == "undecryptable"


def test_encrypted_signed_card_action_is_decrypted_and_dispatched(
    lark_callback, register_card_handler
):
    handler = register_card_handler(
        "feedback", _recording_handler(registry.Answer.success("Recorded"))
    )
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 200
    answer = _assert_json(response)
    assert answer["toast"]["type"] == "success"
    assert answer["toast"]["i18n"]["en_us"] == "Recorded"
    (action,) = handler.calls
    assert action.kind == "feedback"
    assert action.value["key"] == "conclusive_usable"
    assert action.operator_open_id == "ou_requester"
    assert action.open_message_id == "om_final_card"
    assert action.open_chat_id == "oc_group_chat"


# ---------------------------------------------------------------------------------------------
# One sha256 verifier with the encrypt key, on every path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_correct_sha256_signature_is_accepted_on_card_and_event_paths(
    lark_callback, register_card_handler, encrypt
):
    card_handler = register_card_handler("feedback", _recording_handler())
    events = []
    register_card_handler.event("im.message.receive_v1", events.append)

    card = lark_callback(feishu.payload("card_action_feedback_click"), encrypt=encrypt)
    event = lark_callback(feishu.payload("im_message_receive"), encrypt=encrypt)

    assert card.status_code == 200 and _assert_json(card) == {}
    assert event.status_code == 200 and _assert_json(event) == {"msg": "success"}
    assert len(card_handler.calls) == 1
    assert len(events) == 1


def test_legacy_sha1_token_signature_is_401_and_nothing_is_written(
    lark_callback, register_card_handler
):
    handler = register_card_handler("feedback", _recording_handler())
    body = feishu.payload("card_action_feedback_click")
    raw = json.dumps(body).encode()
    ts, nonce = str(int(time.time())), "n-42"
    sha1 = hashlib.sha1((ts + nonce + feishu.VERIFICATION_TOKEN).encode() + raw).hexdigest()
    response = lark_callback(
        raw,
        encrypt=False,
        headers={
            "X-Lark-Request-Timestamp": ts,
            "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": sha1,
        },
    )
    assert response.status_code == 401
    assert _assert_json(response)["error"] == "invalid_signature"
    assert handler.calls == []
    assert not InboundEvent.objects.exists()


def test_upper_case_hex_signature_is_refused_with_401_never_500(
    lark_callback, lark_bot, client, register_card_handler
):
    """Documented choice (DEVELOPING.md): Feishu sends lower-case hex; anything else is 401."""
    handler = register_card_handler("feedback", _recording_handler())
    raw, headers = seal(
        feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY
    )
    headers["X-Lark-Signature"] = headers["X-Lark-Signature"].upper()
    response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(raw, headers))
    assert response.status_code == 401
    assert _assert_json(response)["error"] == "invalid_signature"
    assert handler.calls == []


@pytest.mark.parametrize(
    "missing", ["X-Lark-Signature", "X-Lark-Request-Timestamp", "X-Lark-Request-Nonce"]
)
def test_missing_signature_header_is_401_not_a_500(lark_callback, missing):
    response = lark_callback(feishu.payload("card_action_feedback_click"), headers={missing: None})
    assert response.status_code == 401
    assert _assert_json(response)["error"] == "missing_signature"
    assert not InboundEvent.objects.exists()


def test_request_older_than_the_replay_window_is_401(lark_callback, lark_bot, client):
    old = str(int(time.time()) - 2 * 24 * 3600)
    raw, headers = seal(
        feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY, timestamp=old
    )
    response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(raw, headers))
    assert response.status_code == 401
    assert _assert_json(response)["error"] == "stale_request"


def test_signature_over_a_tampered_body_is_401(lark_callback, lark_bot, client):
    raw, headers = seal(
        feishu.payload("card_action_feedback_click"),
        encrypt_key=feishu.ENCRYPT_KEY,
        encrypt_body=False,
    )
    tampered = raw.replace(b"ou_requester", b"ou_attacker")
    response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=(tampered, headers))
    assert response.status_code == 401


def test_wrong_verification_token_inside_a_signed_card_action_is_401(lark_callback):
    body = feishu.payload("card_action_feedback_click", {"header.token": "forged"})
    response = lark_callback(body)
    assert response.status_code == 401
    assert _assert_json(response)["error"] == "invalid_token"


# ---------------------------------------------------------------------------------------------
# Every click is routed and answered with JSON, never a 500
# ---------------------------------------------------------------------------------------------


def test_handler_returning_nothing_is_answered_with_empty_object(
    lark_callback, register_card_handler
):
    register_card_handler("feedback", _recording_handler(None))
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 200
    assert _assert_json(response) == {}


def test_unknown_kind_gets_a_warning_toast(lark_callback):
    body = feishu.payload(
        "card_action_feedback_click", {"event.action.value.kind": "does_not_exist"}
    )
    response = lark_callback(body)
    assert response.status_code == 200
    toast = _assert_json(response)["toast"]
    assert toast["type"] == "warning"
    assert set(toast["i18n"]) == {"zh_cn", "en_us"}
    assert toast["i18n"]["zh_cn"] != toast["i18n"]["en_us"]


def test_raising_handler_gets_an_error_toast_and_the_traceback_is_logged(
    lark_callback, register_card_handler, caplog
):
    def broken(action):
        raise RuntimeError("boom in handler")

    register_card_handler("feedback", broken)
    with caplog.at_level(logging.ERROR, logger="interactions.callbacks.dispatcher"):
        response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 200
    assert _assert_json(response)["toast"]["type"] == "error"
    records = [r for r in caplog.records if r.exc_info and "boom in handler" in str(r.exc_info[1])]
    assert records, "the handler's traceback must be logged"


def test_handler_returning_a_wrong_type_gets_an_error_toast(lark_callback, register_card_handler):
    register_card_handler("feedback", lambda action: "not an answer")
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 200
    assert _assert_json(response)["toast"]["type"] == "error"


def test_ordinary_event_is_acked_with_json_and_reaches_registered_handlers(
    lark_callback, register_card_handler
):
    seen = []
    register_card_handler.event("im.message.receive_v1", seen.append)
    response = lark_callback(feishu.payload("im_message_receive"))
    assert response.status_code == 200
    assert _assert_json(response) == {"msg": "success"}
    (event,) = seen
    assert event.event_type == "im.message.receive_v1"
    assert json.loads(event.event["message"]["content"])["text"].startswith("/_interaction")


def test_unregistered_event_type_is_acked_and_a_raising_event_handler_does_not_break_the_ack(
    lark_callback, register_card_handler
):
    other = feishu.payload("im_message_receive", {"header.event_type": "contact.user.created_v3"})
    assert _assert_json(lark_callback(other)) == {"msg": "success"}

    def broken(event):
        raise RuntimeError("event handler failed")

    later = []
    register_card_handler.event("im.message.receive_v1", broken)
    register_card_handler.event("im.message.receive_v1", later.append)
    response = lark_callback(feishu.payload("im_message_receive"))
    assert response.status_code == 200 and _assert_json(response) == {"msg": "success"}
    assert len(later) == 1


def test_legacy_v1_card_callback_is_refused_with_a_json_400(lark_callback, client, lark_bot):
    body = feishu.payload("legacy_card_action_v1")
    unsigned = client.post(
        f"/lark/{lark_bot.app_id}/callback", data=body, content_type="application/json"
    )
    signed = lark_callback(body, encrypt=False)
    for response in (unsigned, signed):
        assert response.status_code == 400
        assert _assert_json(response)["error"] == "legacy_card_callback"
    assert not InboundEvent.objects.exists()


def test_unknown_app_id_is_a_json_404(client, transactional_db):
    response = client.post("/lark/cli_nobody/callback", data={}, content_type="application/json")
    assert response.status_code == 404
    assert _assert_json(response)["error"] == "unknown_app"


def test_get_is_a_json_405(client, lark_bot):
    response = client.get(f"/lark/{lark_bot.app_id}/callback")
    assert response.status_code == 405
    assert _assert_json(response)["error"] == "method_not_allowed"


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'{"schema": "2.0", "header": "x"}'])
def test_malformed_bodies_are_json_400s(lark_callback, raw):
    response = lark_callback(raw, encrypt=False)
    assert response.status_code == 400
    assert _assert_json(response)["error"] in {"malformed_body", "malformed_payload"}


@pytest.mark.parametrize(
    ("raw", "encrypt"),
    [
        (b'{"schema": "2.0"}', False),
        (b"{}", False),
        (b'{"type": "event_callback\\n\\u001b[31m"}', False),
        (b"not json", True),  # decrypts (signed, right key) to something that is not JSON
        (b"[1, 2]", True),
        (b'{"open_message_id": "om_x", "action": {}}', True),  # legacy v1 shape, encrypted
    ],
)
def test_payloads_lark_oapi_cannot_read_are_one_warning_line_without_a_traceback(
    lark_callback, raw, encrypt, caplog
):
    # Anyone can POST here: lark-oapi's ERROR + traceback per such request is dropped, and
    # Cardloop's one line names the reason (quoted: no control characters reach the log).
    with caplog.at_level(logging.INFO):
        response = lark_callback(raw, encrypt=encrypt)
    assert response.status_code == 400
    assert _assert_json(response)["error"] == "malformed_payload"
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r for r in caplog.records if r.exc_info] == []
    (line,) = [
        r.getMessage() for r in caplog.records if r.name == "interactions.channels.feishu.ingress"
    ]
    assert "could not process (" in line and "refused with 400" in line
    assert "\n" not in line and "\x1b" not in line


def test_an_error_raised_in_cardloops_own_processor_keeps_its_traceback(
    lark_callback, monkeypatch, caplog
):
    from interactions.channels.feishu import ingress

    def broken(self, data):
        raise RuntimeError("bug in Cardloop")

    monkeypatch.setattr(ingress._CardActionProcessor, "do", broken)
    with caplog.at_level(logging.INFO):
        response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert response.status_code == 400
    (kept,) = [r for r in caplog.records if r.exc_info]
    assert kept.levelno == logging.ERROR and isinstance(kept.exc_info[1], RuntimeError)


DEEP = b'{"schema": "2.0", "event": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize("encrypt", [False, True], ids=["plain", "encrypted"])
def test_deeply_nested_bodies_are_json_400s(lark_callback, encrypt):
    # json.loads raises RecursionError (not ValueError) past ~1000 levels.
    response = lark_callback(DEEP, encrypt=encrypt)
    assert response.status_code == 400
    assert _assert_json(response)["error"] in {"malformed_body", "malformed_payload"}


def test_bot_without_verification_token_refuses_callbacks(make_bot, client, transactional_db):
    bot = make_bot(app_id="cli_no_token", encrypt_key="ek")
    response = feishu.post_callback(
        client, bot.app_id, feishu.payload("url_verification"), encrypt_key="ek"
    )
    assert response.status_code == 403
    assert _assert_json(response)["error"] == "callback_not_configured"


# ---------------------------------------------------------------------------------------------
# Real-format fixtures and value shapes
# ---------------------------------------------------------------------------------------------


def test_value_in_action_with_unknown_keys_everywhere_is_read(lark_callback, register_card_handler):
    handler = register_card_handler("feedback", _recording_handler())
    response = lark_callback(feishu.payload("card_action_value_in_action"))
    assert response.status_code == 200
    (action,) = handler.calls
    assert action.value == {
        "kind": "feedback",
        "delivery": "del_PLACEHOLDER",
        "key": "incorrect",
        "rev": "",
    }
    assert action.timezone == "Asia/Shanghai"
    assert action.name == "fb_incorrect"


def test_minimal_operator_with_open_id_only_reaches_the_handler(
    lark_callback, register_card_handler
):
    handler = register_card_handler("feedback", _recording_handler())
    response = lark_callback(feishu.payload("card_action_minimal_operator"))
    assert response.status_code == 200
    (action,) = handler.calls
    assert action.operator_open_id == "ou_other"
    assert action.operator_union_id == ""
    assert action.host == ""
    assert action.value["key"] == "effective_progress"


def test_string_json_value_is_decoded_for_the_handler(lark_callback, register_card_handler):
    handler = register_card_handler("feedback", _recording_handler())
    value = json.dumps({"kind": "feedback", "delivery": "del_1", "key": "k", "rev": ""})
    response = lark_callback(
        feishu.payload("card_action_feedback_click", {"event.action.value": value})
    )
    assert response.status_code == 200
    assert handler.calls[0].value["delivery"] == "del_1"


@pytest.mark.parametrize("value", ["not json", "[1, 2]", 42], ids=["text", "array", "number"])
def test_value_that_is_not_an_object_gets_a_warning_toast(lark_callback, value):
    response = lark_callback(
        feishu.payload("card_action_feedback_click", {"event.action.value": value})
    )
    assert response.status_code == 200
    assert _assert_json(response)["toast"]["type"] == "warning"


def test_form_submit_passes_form_value_to_the_handler(lark_callback, register_card_handler):
    handler = register_card_handler("feishu_ask", _recording_handler())
    lark_callback(feishu.payload("card_action_ask_submit"))
    (action,) = handler.calls
    assert action.form_value == {"q0": "1", "c0": "", "q1": ["0", "2"], "c1": "也请检查测试环境"}
    assert action.name == "ask_0_submit"


def test_callback_logs_never_contain_tokens_or_operator_ids(
    lark_callback, register_card_handler, caplog
):
    def broken(action):
        raise RuntimeError("handler failure")

    register_card_handler("feedback", broken)
    body = feishu.payload("card_action_feedback_click")
    with caplog.at_level(logging.DEBUG):
        lark_callback(body)
        lark_callback(body)  # duplicate
        lark_callback(
            feishu.payload("card_action_feedback_click", {"event.action.value.kind": "nope"})
        )
    text = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (
        "ou_requester",
        "on_requester",
        "c-295ee57216a5dc9de90fefd0aadb4b1d7d337bc1",
        feishu.VERIFICATION_TOKEN,
        feishu.ENCRYPT_KEY,
        "8675e1a2",
    ):
        assert secret not in text


# ---------------------------------------------------------------------------------------------
# A repeated event is handled once (dedupe at the transport), and the budget
# ---------------------------------------------------------------------------------------------


def test_same_event_id_twice_runs_the_handler_once_and_repeats_the_answer(
    lark_callback, register_card_handler
):
    handler = register_card_handler(
        "feedback", _recording_handler(registry.Answer.success("Recorded"))
    )
    body = feishu.payload("card_action_feedback_click")
    first = _assert_json(lark_callback(body))
    second = _assert_json(lark_callback(body))
    assert len(handler.calls) == 1
    assert second == first
    assert InboundEvent.objects.get().status == InboundEvent.Status.ANSWERED


def test_same_event_type_and_payload_with_a_new_event_id_is_handled_again(
    lark_callback, register_card_handler
):
    handler = register_card_handler("feedback", _recording_handler())
    lark_callback(feishu.payload("card_action_feedback_click"))
    lark_callback(feishu.payload("card_action_feedback_click"))  # fresh event_id: a real 2nd click
    assert len(handler.calls) == 2


def test_duplicate_event_is_not_delivered_twice(lark_callback, register_card_handler):
    seen = []
    register_card_handler.event("im.message.receive_v1", seen.append)
    body = feishu.payload("im_message_receive")
    lark_callback(body)
    assert _assert_json(lark_callback(body)) == {"msg": "success"}
    assert len(seen) == 1


def test_duplicate_while_the_first_is_still_running_gets_an_info_toast(
    lark_callback, register_card_handler
):
    started, release = threading.Event(), threading.Event()

    def slow(action):
        started.set()
        release.wait(5)
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", slow)
    body = feishu.payload("card_action_feedback_click")
    results = {}

    def post_first():
        try:
            results["first"] = lark_callback(body)
        finally:
            connections.close_all()

    first = threading.Thread(target=post_first)
    first.start()
    assert started.wait(5)
    second = _assert_json(lark_callback(body))
    release.set()
    first.join(10)
    assert second["toast"]["type"] == "info"
    assert _assert_json(results["first"])["toast"]["type"] == "success"


@pytest.mark.postgres
def test_concurrent_duplicates_run_the_handler_once_on_postgresql(lark_bot, register_card_handler):
    from django.test import Client

    runs = []
    lock = threading.Lock()

    def handler(action):
        with lock:
            runs.append(action.event_id)
        time.sleep(0.2)
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    sealed = seal(feishu.payload("card_action_feedback_click"), encrypt_key=feishu.ENCRYPT_KEY)
    barrier = threading.Barrier(4)
    answers = []

    def post():
        client = Client()
        barrier.wait()
        try:
            response = feishu.post_callback(client, lark_bot.app_id, b"", sealed=sealed)
            answers.append((response.status_code, json.loads(response.content)))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert len(runs) == 1
    assert [status for status, _ in answers] == [200] * 4
    assert all(answer["toast"]["type"] in {"success", "info"} for _, answer in answers)
    assert InboundEvent.objects.count() == 1


def test_handler_past_the_budget_gets_an_info_toast_and_its_work_completes(
    lark_callback, register_card_handler, settings
):
    from botadmin.models import Chat

    settings.CARDLOOP_CALLBACK_BUDGET = 0.3
    done = threading.Event()

    def slow(action):
        time.sleep(1.0)
        Chat.objects.create(chat_id="oc_written_late")
        done.set()
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", slow)
    started = time.monotonic()
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    answered_after = time.monotonic() - started
    assert _assert_json(response)["toast"]["type"] == "info"
    assert answered_after < 1.0
    assert done.wait(5)
    assert Chat.objects.filter(chat_id="oc_written_late").exists()
    for _ in range(50):  # the dedupe row gets the handler's own answer once it finished
        row = InboundEvent.objects.get()
        if row.status == InboundEvent.Status.ANSWERED:
            break
        time.sleep(0.05)
    assert row.answer["toast"]["type"] == "success"


# ---------------------------------------------------------------------------------------------
# Through the ASGI application
# ---------------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_card_action_through_the_asgi_application_is_answered_with_json(
    lark_bot, register_card_handler
):
    register_card_handler("feedback", _recording_handler(registry.Answer.info("Noted")))
    status, headers, answer = await feishu.apost_callback(
        lark_bot.app_id, feishu.payload("card_action_feedback_click")
    )
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert answer["toast"]["i18n"]["en_us"] == "Noted"
    status, _, answer = await feishu.apost_callback(
        lark_bot.app_id, feishu.payload("url_verification")
    )
    assert (status, answer) == (200, {"challenge": "ajls384kdjx98XX"})


@pytest.mark.parametrize("bad", ["x\x00y", "x\ud800y", "\udfff"], ids=["nul", "high", "low"])
@pytest.mark.parametrize(
    "path",
    ["event.action.value.delivery", "header.event_id", "event.operator.open_id", "event.token"],
)
def test_nul_or_lone_surrogate_anywhere_in_a_card_action_gets_a_warning_toast_and_nothing_is_written(
    lark_callback, register_card_handler, caplog, path, bad
):
    calls = []
    register_card_handler("feedback", lambda action: calls.append(action))
    # ensure_ascii: a lone surrogate goes out as a `\\udXXX` escape, as a sender could write it
    payload = json.dumps(feishu.payload("card_action_feedback_click", {path: bad})).encode()
    response = lark_callback(payload)
    answer = _assert_json(response)
    assert answer["toast"]["type"] == "warning"
    assert answer["toast"]["i18n"]["zh_cn"] == "请求中包含 Cardloop 无法接受的字符。"
    assert calls == [] and not InboundEvent.objects.exists()
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.parametrize("bad", ["ev\x00", "ev\ud83d"], ids=["nul", "surrogate"])
def test_event_with_a_nul_or_lone_surrogate_is_acked_and_dropped_without_a_traceback(
    lark_callback, register_card_handler, caplog, bad
):
    seen = []
    register_card_handler.event("im.message.receive_v1", seen.append)
    payload = json.dumps(feishu.payload("im_message_receive", {"header.event_id": bad})).encode()
    response = lark_callback(payload)
    assert response.status_code == 200
    assert seen == [] and not InboundEvent.objects.exists()
    assert not [r for r in caplog.records if r.exc_info]
