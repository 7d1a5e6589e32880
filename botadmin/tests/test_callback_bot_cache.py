"""The callback path's bot cache (`Bot.objects.for_callback`, `botadmin.callbackcache`): one
query per bot and cache lifetime instead of one per click, a change taking effect at once in
the process that made it and within `CARDLOOP_BOT_CACHE_SECONDS` in another (a Daphne child
on the same database)."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from botadmin import services
from botadmin.models import Bot
from interactions.lark.signing import seal
from interactions.tests.test_click_durability import (
    _child_env,
    _click_body,
    _delivery,
    _post,
    _start_daphne,
    _stop,
    _toast,
)
from plumbing import secretstore
from plumbing.db import outage
from tests import feishu
from tests.processes import wait_for_child_sessions_to_end


def test_a_bot_looked_up_again_for_callbacks_costs_no_query_and_no_file_read(
    lark_bot, settings, django_assert_num_queries
):
    settings.CARDLOOP_BOT_CACHE_SECONDS = 60
    with django_assert_num_queries(1):
        first = Bot.objects.for_callback(lark_bot.app_id)
    assert first.secret("encrypt_key") == feishu.ENCRYPT_KEY
    secretstore.delete_secret(lark_bot.encrypt_key_ref)  # a file read now would find nothing
    with django_assert_num_queries(0):
        again = Bot.objects.for_callback(lark_bot.app_id)
    assert again.pk == lark_bot.pk
    assert again.secret("encrypt_key") == feishu.ENCRYPT_KEY
    assert again.secret("verification_token") == feishu.VERIFICATION_TOKEN
    again.name = "changed by one caller"
    assert Bot.objects.for_callback(lark_bot.app_id).name == lark_bot.name  # copies


def test_a_changed_secret_is_used_by_the_next_callback_lookup_of_the_same_process(
    lark_bot, settings
):
    settings.CARDLOOP_BOT_CACHE_SECONDS = 60
    assert Bot.objects.for_callback(lark_bot.app_id).secret("encrypt_key") == feishu.ENCRYPT_KEY
    services.set_bot_secret("ops", lark_bot, "encrypt_key", "a-new-encrypt-key")
    assert Bot.objects.for_callback(lark_bot.app_id).secret("encrypt_key") == "a-new-encrypt-key"
    services.clear_bot_secret("ops", lark_bot, "verification_token")
    assert Bot.objects.for_callback(lark_bot.app_id).secret("verification_token") == ""


def test_a_deleted_bot_and_unknown_app_ids_are_not_answered_from_the_cache(
    lark_bot, settings, django_assert_num_queries
):
    settings.CARDLOOP_BOT_CACHE_SECONDS = 60
    assert Bot.objects.for_callback(lark_bot.app_id) is not None
    services.delete_bot("ops", lark_bot)
    assert Bot.objects.for_callback(feishu.APP_ID) is None
    with django_assert_num_queries(1):  # an unknown app id is looked up every time
        assert Bot.objects.for_callback("cli_nobody") is None
    with django_assert_num_queries(1):
        assert Bot.objects.for_callback("cli_nobody") is None


@pytest.mark.django_db(transaction=True)
def test_a_secret_changed_in_another_process_takes_effect_within_the_cache_lifetime(
    lark_bot, tmp_path, settings
):
    """The child keeps the bot for CARDLOOP_BOT_CACHE_SECONDS (1 s); the secret is changed
    here (another process). Once that time has passed, a click signed with the new Encrypt
    Key is accepted there and one signed with the old key is refused."""
    settings.CARDLOOP_LARK_DRY_RUN = True
    env = _child_env(CARDLOOP_BOT_CACHE_SECONDS="1")
    url, process, log = _start_daphne(env, tmp_path / "daphne.log")
    try:
        old = _delivery(lark_bot, "t-cache-old")
        sealed_old = seal(_click_body(old, "evt_cache_old"), encrypt_key=feishu.ENCRYPT_KEY)
        assert _toast(_post(url, sealed_old))["type"] == "success"
        services.set_bot_secret("ops", lark_bot, "encrypt_key", "the-rotated-encrypt-key")
        time.sleep(1.5)  # the child's entry has expired by now
        new = _delivery(lark_bot, "t-cache-new")
        sealed_new = seal(_click_body(new, "evt_cache_new"), encrypt_key="the-rotated-encrypt-key")
        assert _toast(_post(url, sealed_new))["type"] == "success"
        stale = _delivery(lark_bot, "t-cache-stale")
        refused = _post(
            url, seal(_click_body(stale, "evt_cache_stale"), encrypt_key=feishu.ENCRYPT_KEY)
        )
        assert refused.status_code == 400  # the old key no longer opens the body
        assert refused.json()["error"] == "undecryptable"
    finally:
        _stop(process, log)
        wait_for_child_sessions_to_end()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_while_the_database_is_known_gone_an_expired_entry_still_identifies_the_bot(
    lark_bot, settings
):
    """The bot's click can then reach the dispatcher and get the honest "try again" toast;
    an app id never seen still fails with the database's error (→ 503). PostgreSQL: a known
    SQLite lock stops only writes, and the lookup is a read."""
    settings.CARDLOOP_BOT_CACHE_SECONDS = 0.01
    assert Bot.objects.for_callback(lark_bot.app_id).pk == lark_bot.pk
    time.sleep(0.05)  # the entry has expired
    connection.close()  # the next query needs a new connection
    outage.connect_failed("default", ConnectionRefusedError("cut"))
    try:
        stale = Bot.objects.for_callback(lark_bot.app_id)
        with pytest.raises(outage.DatabaseUnavailable):
            Bot.objects.for_callback("cli_never_seen")
    finally:
        outage.reset("default")
    assert stale.pk == lark_bot.pk
    assert stale.secret("encrypt_key") == feishu.ENCRYPT_KEY
