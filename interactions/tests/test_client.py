"""The Feishu gateway: the real lark-oapi client against the loopback Open API stub, error
classification, domain choice, and dry run."""

from __future__ import annotations

import json
import logging

import lark_oapi as lark
import pytest

from interactions.lark.client import LarkApiError, domain_for, gateway_for, is_dry_run
from interactions.lark.dryrun import DryRunGateway
from interactions.tests.test_cardjson import feedback_card
from tests import feishu

pytestmark = pytest.mark.django_db


def test_create_send_update_patch_and_get_go_through_lark_oapi_to_the_stub(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    assert gateway.dry_run is False

    card_id = gateway.create_card(feedback_card())
    message_id = gateway.send_card(receive_id="oc_group_chat", card_id=card_id, uuid="del_1")
    gateway.update_element(
        card_id, "fb_prompt", {"tag": "markdown", "content": "Thanks"}, sequence=1
    )
    gateway.batch_update_elements(
        card_id,
        {"fb_prompt": {"tag": "markdown", "content": "Again"}, "fb_form": {"tag": "hr"}},
        sequence=2,
    )
    new_card = feedback_card()
    new_card["body"]["elements"][0]["content"] = "Replaced"
    gateway.update_card(card_id, new_card, sequence=3)
    fetched = gateway.get_message(message_id)

    token_call, create, send, element, batch, update, get = lark_stub.calls
    assert token_call.path == "/open-apis/auth/v3/tenant_access_token/internal"
    assert token_call.body == {"app_id": feishu.APP_ID, "app_secret": feishu.APP_SECRET}
    assert create.headers["Authorization"] == f"Bearer t-stub-{feishu.APP_ID}"
    assert create.field_json("data")["schema"] == "2.0"
    assert send.query == {"receive_id_type": "chat_id"}
    assert send.body["uuid"] == "del_1"
    assert send.field_json("content") == {"type": "card", "data": {"card_id": card_id}}
    assert (element.method, element.path) == (
        "PUT",
        f"/open-apis/cardkit/v1/cards/{card_id}/elements/fb_prompt",
    )
    assert element.body["sequence"] == 1
    assert [a["params"]["element_id"] for a in batch.field_json("actions")] == [
        "fb_prompt",
        "fb_form",
    ]
    assert update.body["card"]["type"] == "card_json" and update.body["sequence"] == 3
    assert get.method == "GET"
    assert lark_stub.cards[card_id].sequences == [1, 2, 3]
    assert lark_stub.cards[card_id].card["body"]["elements"][0]["content"] == "Replaced"
    assert fetched["message_id"] == message_id and fetched["msg_type"] == "interactive"
    assert json.loads(fetched["content"])["schema"] == "2.0"


def test_raw_card_message_is_patched_never_put(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    message_id = gateway.send_card(
        receive_id="ou_requester", receive_id_type="open_id", card=feedback_card()
    )
    card = feedback_card()
    card["body"]["elements"][0]["content"] = "answered by A"
    gateway.patch_message(message_id, card)
    assert [c.method for c in lark_stub.calls_to(path_prefix="/open-apis/im/v1/messages")] == [
        "POST",
        "PATCH",
    ]
    assert (
        lark_stub.messages[message_id]["card"]["body"]["elements"][0]["content"] == "answered by A"
    )
    assert lark_stub.calls_to("PUT", "/open-apis/im") == []


def test_send_with_the_same_uuid_returns_the_first_message(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    first = gateway.send_card(receive_id="oc_group_chat", card=feedback_card(), uuid="del_same")
    second = gateway.send_card(receive_id="oc_group_chat", card=feedback_card(), uuid="del_same")
    assert first == second
    assert len(lark_stub.messages) == 1


def test_non_increasing_sequence_is_rejected_by_the_stub_as_a_permanent_error(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    card_id = gateway.create_card(feedback_card())
    gateway.update_element(card_id, "fb_prompt", {"tag": "markdown", "content": "1"}, sequence=5)
    with pytest.raises(LarkApiError) as info:
        gateway.update_element(
            card_id, "fb_prompt", {"tag": "markdown", "content": "2"}, sequence=5
        )
    assert info.value.code == 300317
    assert info.value.retryable is False
    assert info.value.log_id.startswith("stub-log-")
    assert lark_stub.cards[card_id].card["body"]["elements"][0]["content"] == "1"


@pytest.mark.parametrize(
    ("code", "http_status", "retryable", "rate_limited"),
    [
        (230020, 400, True, True),
        (99991400, 400, True, True),
        (1, 429, True, True),
        (1, 503, True, False),
        (200810, 400, True, False),
        (230031, 400, False, False),
        (230099, 400, False, False),
    ],
)
def test_api_errors_carry_code_msg_log_id_and_whether_to_retry(
    lark_stub, lark_bot, code, http_status, retryable, rate_limited
):
    gateway = gateway_for(lark_bot)
    lark_stub.fail(
        "PATCH", "/open-apis/im/v1/messages/", code=code, http_status=http_status, msg="nope"
    )
    with pytest.raises(LarkApiError) as info:
        gateway.patch_message("om_any", feedback_card())
    error = info.value
    assert (error.code, error.msg, error.http_status) == (code, "nope", http_status)
    assert (error.retryable, error.rate_limited) == (retryable, rate_limited)
    assert error.call == "im.message.patch"
    assert error.log_id and error.log_id in str(error)


def test_html_error_page_and_network_failure_are_retryable(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    lark_stub.fail(
        "POST", "/open-apis/cardkit/v1/cards", http_status=502, body=b"<html>bad gateway</html>"
    )
    with pytest.raises(LarkApiError) as info:
        gateway.create_card(feedback_card())
    assert info.value.retryable and info.value.code == -1

    lark_stub.stop()
    with pytest.raises(LarkApiError) as info:
        gateway.create_card(feedback_card())
    assert info.value.retryable and "network" in info.value.msg


def test_wrong_app_secret_is_a_permanent_token_error(settings, monkeypatch, lark_bot):
    from interactions.lark.client import reset_clients
    from tests.lark_stub import FeishuStub

    stub = FeishuStub(app_secrets={feishu.APP_ID: "the-real-secret"}).start()
    try:
        settings.CARDLOOP_LARK_DOMAIN = stub.url
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        reset_clients()
        with pytest.raises(LarkApiError) as info:
            gateway_for(lark_bot).create_card(feedback_card())
        assert info.value.code == 10014 and not info.value.retryable
        assert stub.calls_to("POST", "/open-apis/cardkit") == []
    finally:
        stub.stop()
        reset_clients()


def test_invalid_tenant_token_is_retryable_and_the_cached_token_is_dropped(lark_stub, lark_bot):
    gateway = gateway_for(lark_bot)
    gateway.create_card(feedback_card())
    assert lark_stub.token_requests == 1
    lark_stub.fail("POST", "/open-apis/cardkit/v1/cards", code=99991663)
    with pytest.raises(LarkApiError) as info:
        gateway.create_card(feedback_card())
    assert info.value.retryable
    gateway.create_card(feedback_card())
    assert lark_stub.token_requests == 2


def test_domain_follows_the_bot_unless_overridden(make_bot, settings):
    settings.CARDLOOP_LARK_DOMAIN = ""
    assert domain_for(make_bot(app_id="cli_f")) == lark.FEISHU_DOMAIN
    assert domain_for(make_bot(app_id="cli_l", domain="lark")) == lark.LARK_DOMAIN
    settings.CARDLOOP_LARK_DOMAIN = "http://127.0.0.1:9/"
    assert domain_for(make_bot(app_id="cli_o", domain="lark")) == "http://127.0.0.1:9"


def test_dry_run_is_chosen_per_bot_unless_forced(make_bot, settings):
    with_secret = make_bot(app_id="cli_s", app_secret="s")
    without = make_bot(app_id="cli_n")
    settings.CARDLOOP_LARK_DRY_RUN = None
    assert (is_dry_run(with_secret), is_dry_run(without)) == (False, True)
    settings.CARDLOOP_LARK_DRY_RUN = True
    assert isinstance(gateway_for(with_secret), DryRunGateway)
    settings.CARDLOOP_LARK_DRY_RUN = False
    assert is_dry_run(without) is False
    with pytest.raises(LarkApiError):
        gateway_for(without)


def test_dry_run_logs_calls_with_ids_and_sizes_and_returns_synthetic_ids(
    make_bot, caplog, lark_stub
):
    bot = make_bot(
        app_id="cli_demo", encrypt_key="ek-secret-value", verification_token="vt-secret-value"
    )
    card = feedback_card()
    card["body"]["elements"][0]["content"] = "SENTINEL answer text"
    gateway = gateway_for(bot)
    with caplog.at_level(logging.INFO, logger="interactions.lark.dryrun"):
        card_id = gateway.create_card(card)
        message_id = gateway.send_card(receive_id="oc_group_chat", card_id=card_id, uuid="del_1")
        private = gateway.send_card(receive_id="ou_person", receive_id_type="open_id", card=card)
        gateway.update_element(
            card_id, "fb_prompt", {"tag": "markdown", "content": "SENTINEL"}, sequence=2
        )
        gateway.batch_update_elements(card_id, {"a": {"tag": "hr"}, "b": {"tag": "hr"}}, sequence=3)
        gateway.update_card(card_id, card, sequence=4)
        gateway.patch_message(message_id, card)
        fetched = gateway.get_message(message_id)
    assert (
        card_id.startswith("dry_card_")
        and message_id.startswith("om_dry_")
        and private != message_id
    )
    assert fetched["message_id"] == message_id
    text = "\n".join(r.getMessage() for r in caplog.records)
    for call in (
        "cardkit.card.create",
        "im.message.create",
        "cardkit.card_element.update",
        "cardkit.card.batch_update",
        "cardkit.card.update",
        "im.message.patch",
        "im.message.get",
    ):
        assert call in text
    assert card_id in text and message_id in text and "oc_group_chat" in text
    assert "sequence=2" in text and "elements=a,b" in text and "bytes" in text
    for secret in ("SENTINEL", "ou_person", "ek-secret-value", "vt-secret-value"):
        assert secret not in text
    assert lark_stub.calls == []


def test_retry_after_is_read_in_seconds_dates_and_feishus_header_and_bad_values_are_ignored():
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    from interactions.lark.client import retry_after_seconds

    in_five_minutes = format_datetime(datetime.now(UTC) + timedelta(minutes=5), usegmt=True)
    assert retry_after_seconds({"Retry-After": "120"}) == 120
    assert 290 < retry_after_seconds({"retry-after": in_five_minutes}) <= 300
    assert retry_after_seconds({"x-ogw-ratelimit-reset": "3"}) == 3
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_rate_limit_error_carries_the_servers_retry_after(lark_stub, lark_bot):
    lark_stub.fail(
        "POST", "/open-apis/cardkit/v1/cards", code=230020, headers={"Retry-After": "30"}
    )
    with pytest.raises(LarkApiError) as info:
        gateway_for(lark_bot).create_card(feedback_card())
    assert info.value.retry_after == 30 and info.value.rate_limited
