"""Acknowledged means recorded: a click Cardloop claimed is recorded exactly once — through a
database cut (PostgreSQL behind the loopback TCP proxy of `tests/tcpproxy.py`, so nobody's
database is stopped), a web process killed mid-click and a transient error inside the handler —
by the identical retry or by the recovery in `card_worker`; a transient error is never
stored as the click's answer; while the database is gone the API and the callback route
answer 503 `database_unavailable` with `Retry-After` and `/readyz` answers 503 (its times are
in bench/README.md, not asserted here).

A click is made slow where it matters by locking its delivery row from a direct connection
(the feedback handler waits for that lock inside its write)."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace

import httpx
import pytest
from django.db import connection, utils

from botadmin import services
from feedback import deliveries
from feedback.models import Delivery, Revision
from interactions.callbacks import dispatcher, inbound, recovery, registry
from interactions.lark.signing import seal
from interactions.models import InboundEvent
from plumbing.db import transient
from tests import feishu
from tests.processes import child_env, wait_for_child_sessions_to_end, wait_until_serving
from tests.tcpproxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)

#: The lease children run with: short, so a test waits seconds, not the default 15.
LEASE = "2"
CARD = {
    "schema": "2.0",
    "config": {"update_multi": True},
    "body": {"elements": [{"tag": "markdown", "content": "answer"}]},
}


def _delivery(bot, turn: str) -> Delivery:
    services.set_policy_layer("test", bot, {"enabled": True})
    return deliveries.deliver(
        bot,
        deliveries.DeliveryRequest(
            chat_id="oc_durable",
            card=CARD,
            response_kind="final",
            session_id="sess-durable",
            turn_id=turn,
            requester_open_id="ou_durable",
        ),
    ).delivery


def _sealed_click(delivery: Delivery, event_id: str) -> tuple[bytes, dict[str, str]]:
    return seal(_click_body(delivery, event_id), encrypt_key=feishu.ENCRYPT_KEY)


def _click_body(delivery: Delivery, event_id: str) -> dict:
    return feishu.payload(
        "card_action_feedback_click",
        {
            "header.event_id": event_id,
            "event.action.value.delivery": delivery.delivery_id,
            "event.action.value.key": "conclusive_usable",
            "event.action.value.rev": "",
            "event.operator.open_id": "ou_durable",
            "event.context.open_message_id": delivery.platform_message_id,
            "event.context.open_chat_id": "oc_durable",
        },
        fresh_event_id=False,
    )


def _post(url: str, sealed: tuple[bytes, dict[str, str]]) -> httpx.Response:
    raw, headers = sealed
    return httpx.post(
        f"{url}/lark/{feishu.APP_ID}/callback",
        content=raw,
        headers=headers,
        timeout=30,
        trust_env=False,
    )


def _toast(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()["toast"]


def _retry_until_answered(url: str, sealed, *, timeout: float = 40.0) -> dict:
    """Send the same signed bytes again, as Feishu or the person does, until the answer is no
    longer the info toast of a click still being processed (nor a 503, which Feishu retries);
    returns that toast."""
    deadline = time.monotonic() + timeout
    while True:
        response = _post(url, sealed)
        if response.status_code == 503:  # the outage not over for this process yet: retried
            assert time.monotonic() < deadline, f"still unavailable: {response.text}"
            time.sleep(0.5)
            continue
        toast = _toast(response)
        if toast["type"] != "info":
            return toast
        assert time.monotonic() < deadline, f"still not recorded: {toast}"
        time.sleep(0.5)


def _wait_answered(event_id: str, timeout: float = 40.0) -> InboundEvent:
    deadline = time.monotonic() + timeout
    while True:
        row = InboundEvent.objects.filter(event_id=event_id).first()
        if row is not None and row.status == InboundEvent.Status.ANSWERED:
            return row
        assert time.monotonic() < deadline, f"{event_id} not answered: {row and row.status}"
        time.sleep(0.3)


@contextmanager
def _locked_delivery(delivery: Delivery):
    """Hold a row lock on `delivery` from a connection of its own (PostgreSQL, not through
    the proxy) until the block ends; its click's handler waits for it inside its write."""
    import psycopg

    db = connection.settings_dict
    raw = psycopg.connect(
        dbname=db["NAME"],
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
    )
    try:
        with raw.transaction():
            raw.execute(
                f"SELECT id FROM {Delivery._meta.db_table} WHERE id = %s FOR UPDATE",  # noqa: S608
                [delivery.pk],
            )
            yield
    finally:
        raw.close()


def _wait_claimed(event_id: str, timeout: float = 20.0) -> InboundEvent:
    deadline = time.monotonic() + timeout
    while True:
        row = InboundEvent.objects.filter(event_id=event_id).first()
        if row is not None:
            return row
        assert time.monotonic() < deadline, f"{event_id} never claimed"
        time.sleep(0.1)


def _start_daphne(env: dict[str, str], log_path) -> tuple[str, subprocess.Popen, object]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the caller
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "cardloop.asgi:application"],
        env=env,
        pass_fds=[sock.fileno()],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    sock.close()
    wait_until_serving(f"{url}/healthz", process, log_path)
    return url, process, log


def _stop(process: subprocess.Popen, log) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(15)
    log.close()


def _child_env(**extra: str) -> dict[str, str]:
    return child_env(
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        CARDLOOP_CLICK_LEASE=LEASE,
        CARDLOOP_LARK_DRY_RUN="true",
        CARDLOOP_LOG_LEVEL="INFO",
        **extra,
    )


@pytest.fixture
def proxied(lark_bot, tmp_path, settings):
    """A Daphne child whose database is PostgreSQL through a `TcpProxy` this test controls
    (pool wait 1 s, lease `LEASE` s); yields `.url`, `.proxy`, `.env`, `.log_path`."""
    settings.CARDLOOP_LARK_DRY_RUN = True
    db = connection.settings_dict
    proxy = TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)).start()
    # no bot cache: a click during the cut must find the database gone at its bot lookup
    env = _child_env(DATABASE_POOL_TIMEOUT="1", CARDLOOP_BOT_CACHE_SECONDS="0")
    env["DATABASE_URL"] = env["DATABASE_URL"].replace(f":{db['PORT'] or 5432}/", f":{proxy.port}/")
    log_path = tmp_path / "daphne.log"
    url, process, log = _start_daphne(env, log_path)
    try:
        yield SimpleNamespace(url=url, proxy=proxy, env=env, log_path=log_path)
    finally:
        proxy.heal()
        _stop(process, log)
        proxy.stop()
        wait_for_child_sessions_to_end()


def _run_card_worker_once(env: dict[str, str], log_path) -> None:
    with open(log_path, "ab") as log:
        subprocess.run(
            [sys.executable, "manage.py", "card_worker", "--once"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=True,
        )


# ---------------------------------------------------------------------------------------------
# PostgreSQL cut through the proxy
# ---------------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_click_while_the_database_is_cut_gets_503_and_nothing_is_claimed(proxied, lark_bot):
    delivery = _delivery(lark_bot, "t-cut-before")
    sealed = _sealed_click(delivery, "evt_cut_before_claim")
    assert _toast(_post(proxied.url, _sealed_click(_delivery(lark_bot, "t-warm"), "evt_warm")))

    proxied.proxy.cut()
    response = _post(proxied.url, sealed)
    assert response.status_code == 503
    assert response.json()["error"] == "database_unavailable"
    assert response.headers["Retry-After"] == "2"
    assert not InboundEvent.objects.filter(event_id="evt_cut_before_claim").exists()

    proxied.proxy.heal()
    toast = _retry_until_answered(proxied.url, sealed)
    assert toast["type"] == "success"
    assert Revision.objects.filter(delivery=delivery).count() == 1


@pytest.mark.postgres
def test_a_click_cut_inside_its_write_is_recorded_once_by_its_identical_retry(proxied, lark_bot):
    delivery = _delivery(lark_bot, "t-cut-inside")
    sealed = _sealed_click(delivery, "evt_cut_inside_write")
    with _locked_delivery(delivery):
        answer = {}
        clicker = threading.Thread(target=lambda: answer.update(_toast(_post(proxied.url, sealed))))
        clicker.start()
        claim = _wait_claimed("evt_cut_inside_write")
        assert claim.action["value"]["delivery"] == delivery.delivery_id
        assert "token" not in claim.action  # the callback token is never stored
        clicker.join(30)
        assert answer["type"] == "info"  # claimed: "still working" is true
        proxied.proxy.cut()  # the handler, waiting for the row lock, loses its connection
    time.sleep(float(LEASE) + 5)  # its tries fail, the lease runs out while the cut lasts
    row = InboundEvent.objects.get(event_id="evt_cut_inside_write")
    assert row.status == InboundEvent.Status.PROCESSING  # the transient error is no answer
    assert row.answer is None
    assert Revision.objects.filter(delivery=delivery).count() == 0

    proxied.proxy.heal()
    toast = _retry_until_answered(proxied.url, sealed)
    assert toast["type"] == "success"
    row.refresh_from_db()
    assert row.status == InboundEvent.Status.ANSWERED
    assert row.answer["toast"]["type"] == "success"
    assert row.action is None and row.lease_until is None  # nothing kept once recorded
    assert row.attempts >= 2
    assert Revision.objects.filter(delivery=delivery).count() == 1


@pytest.mark.postgres
def test_a_click_cut_after_its_claim_is_recorded_once_by_the_recovery_without_a_retry(
    proxied, lark_bot
):
    delivery = _delivery(lark_bot, "t-cut-after-claim")
    sealed = _sealed_click(delivery, "evt_cut_after_claim")
    with _locked_delivery(delivery):
        clicker = threading.Thread(target=_post, args=(proxied.url, sealed))
        clicker.start()
        _wait_claimed("evt_cut_after_claim")
        proxied.proxy.cut()
        clicker.join(30)
    time.sleep(float(LEASE) + 5)
    assert Revision.objects.filter(delivery=delivery).count() == 0
    proxied.proxy.heal()
    worker_env = dict(proxied.env, DATABASE_URL=child_env()["DATABASE_URL"])
    _run_card_worker_once(worker_env, proxied.log_path)
    row = _wait_answered("evt_cut_after_claim")
    assert row.answer["toast"]["type"] == "success"
    assert Revision.objects.filter(delivery=delivery).count() == 1
    # a late retry now gets the recorded answer, and records nothing again
    assert _toast(_post(proxied.url, sealed))["type"] == "success"
    assert Revision.objects.filter(delivery=delivery).count() == 1


@pytest.mark.postgres
def test_while_the_database_is_cut_the_api_and_readyz_answer_503_and_recover_after_heal(
    proxied, lark_bot, make_api_key
):
    raw_key, _key = make_api_key(lark_bot)
    auth = {"Authorization": f"Bearer {raw_key}"}
    ask_url = f"{proxied.url}/api/v1/asks/ask_missing"
    assert httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code == 404

    proxied.proxy.cut()
    response = httpx.get(ask_url, headers=auth, trust_env=False, timeout=30)
    assert response.status_code == 503
    assert response.json()["error"] == "database_unavailable"
    assert response.headers["Retry-After"] == "2"
    ready = httpx.get(f"{proxied.url}/readyz", trust_env=False, timeout=10)
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"]["ok"] is False

    proxied.proxy.heal()
    deadline = time.monotonic() + 20
    while httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code != 404:
        assert time.monotonic() < deadline, "the API did not come back after the heal"
        time.sleep(0.2)
    assert httpx.get(f"{proxied.url}/readyz", trust_env=False, timeout=10).status_code == 200


# ---------------------------------------------------------------------------------------------
# A web process killed mid-click
# ---------------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_clicks_of_a_killed_web_process_are_recorded_once_by_the_retry_and_by_the_recovery(
    lark_bot, tmp_path, settings
):
    settings.CARDLOOP_LARK_DRY_RUN = True
    retried, orphaned = _delivery(lark_bot, "t-kill-retry"), _delivery(lark_bot, "t-kill-orphan")
    sealed_retried = _sealed_click(retried, "evt_kill_retried")
    sealed_orphaned = _sealed_click(orphaned, "evt_kill_orphaned")
    env = _child_env()
    log_path = tmp_path / "daphne.log"
    url, process, log = _start_daphne(env, log_path)
    try:
        with _locked_delivery(retried), _locked_delivery(orphaned):
            for sealed in (sealed_retried, sealed_orphaned):
                assert _toast(_post(url, sealed))["type"] == "info"  # claimed, still working
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        for event_id in ("evt_kill_retried", "evt_kill_orphaned"):
            assert InboundEvent.objects.get(event_id=event_id).status == "processing"
        log.close()
        url, process, log = _start_daphne(env, log_path)
        assert _retry_until_answered(url, sealed_retried)["type"] == "success"
        time.sleep(float(LEASE) + 0.5)
        _run_card_worker_once(env, log_path)
        assert _wait_answered("evt_kill_orphaned").answer["toast"]["type"] == "success"
    finally:
        _stop(process, log)
        wait_for_child_sessions_to_end()
    assert Revision.objects.filter(delivery=retried).count() == 1
    assert Revision.objects.filter(delivery=orphaned).count() == 1


# ---------------------------------------------------------------------------------------------
# Both databases: recovery and transient errors inside a handler
# ---------------------------------------------------------------------------------------------


def test_the_recovery_runs_an_expired_claim_from_its_stored_action_and_clears_it(
    lark_bot, register_card_handler
):
    seen = []
    register_card_handler(
        "durable_probe", lambda action: seen.append(action.value) or registry.Answer.success("ok")
    )
    payload = feishu.payload(
        "card_action_feedback_click", {"event.action.value": {"kind": "durable_probe", "n": 7}}
    )
    action = registry.CardAction.from_payload(lark_bot, payload)
    row, outcome = inbound.claim_card_action(lark_bot, action.event_id, action.to_stored())
    assert outcome == inbound.CREATED
    assert recovery.recover_expired_claims() == 0  # its lease is alive: not touched
    InboundEvent.objects.filter(pk=row.pk).update(lease_until=row.received_at)  # process died

    assert recovery.recover_expired_claims() == 1
    assert seen == [{"kind": "durable_probe", "n": 7}]
    row.refresh_from_db()
    assert row.status == InboundEvent.Status.ANSWERED
    assert row.answer["toast"]["type"] == "success"
    assert row.action is None
    assert recovery.recover_expired_claims() == 0


def test_a_click_whose_write_committed_but_whose_answer_was_lost_is_not_recorded_twice(
    lark_bot, settings
):
    settings.CARDLOOP_LARK_DRY_RUN = True
    delivery = _delivery(lark_bot, "t-committed")
    action = registry.CardAction.from_payload(lark_bot, _click_body(delivery, "evt_committed"))
    row, _outcome = inbound.claim_card_action(lark_bot, action.event_id, action.to_stored())
    # the handler's transaction committed; then the process died before the answer was stored
    registry.handler_for("feedback")(action)
    assert Revision.objects.filter(delivery=delivery).count() == 1
    InboundEvent.objects.filter(pk=row.pk).update(lease_until=row.received_at)

    assert recovery.recover_expired_claims() == 1
    row.refresh_from_db()
    assert row.status == InboundEvent.Status.ANSWERED
    assert row.answer["toast"]["type"] != "error"
    assert Revision.objects.filter(delivery=delivery).count() == 1


def _locked_error() -> sqlite3.OperationalError:
    """A real "database is locked" from SQLite: a second writer that waits 0 s."""
    name = connection.settings_dict["NAME"]
    holder = sqlite3.connect(name, isolation_level=None)
    other = sqlite3.connect(name, isolation_level=None, timeout=0)
    try:
        holder.execute("BEGIN IMMEDIATE")
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            return exc
        raise AssertionError("the second writer got the lock")
    finally:
        holder.close()
        other.close()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own lock error")
def test_sqlite_database_is_locked_is_transient_and_a_constraint_error_is_not(lark_bot):
    error = _locked_error()
    assert "locked" in str(error)
    assert transient.is_transient(error)
    with pytest.raises(utils.OperationalError) as wrapped:
        with connection.wrap_database_errors:
            raise error
    assert transient.is_transient(wrapped.value)  # as Django raises it
    from botadmin.models import Bot

    with pytest.raises(utils.IntegrityError) as duplicate:
        Bot.objects.create(app_id=lark_bot.app_id, name="again")
    assert not transient.is_transient(duplicate.value)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own lock error")
def test_a_handler_failing_with_database_is_locked_is_retried_and_the_error_never_answers(
    lark_callback, register_card_handler
):
    runs = []

    def flaky(action):
        runs.append(action.event_id)
        if len(runs) == 1:
            raise _locked_error()
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", flaky)
    body = feishu.payload("card_action_feedback_click")
    answer = lark_callback(body).json()
    assert answer["toast"]["type"] == "success"
    assert len(runs) == 2
    row = InboundEvent.objects.get(event_id=body["header"]["event_id"])
    assert row.answer["toast"]["type"] == "success"


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write lock")
def test_sqlite_readyz_reports_a_write_lock_it_cannot_take(client):
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        response = client.get("/readyz")
    finally:
        holder.close()
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {
        "ok": False,
        "error": "write_locked",
        "outage_known": False,  # the probe takes no lock of the process: no outage known
    }
    assert client.get("/readyz").json()["checks"]["database"]["ok"] is True


def test_a_click_whose_claim_cannot_be_written_in_time_is_asked_to_try_again():
    answer = dispatcher.budget_answer(dispatcher.Attempt(started=True))
    assert answer["toast"]["type"] == "warning"
    assert "database" in answer["toast"]["i18n"]["en_us"]
    assert "try again" in answer["toast"]["i18n"]["en_us"]
    assert answer["toast"]["i18n"]["zh_cn"] != answer["toast"]["i18n"]["en_us"]  # translated
    assert dispatcher.budget_answer(dispatcher.Attempt(claimed=True)) == dispatcher.still_working()


def test_a_click_still_queued_for_a_handler_thread_at_the_budget_is_told_busy_and_never_recorded(
    lark_bot, settings
):
    """Every handler thread is busy past the budget: the queued click is answered "busy, try
    again" (not "cannot reach the database": the database is fine) and, when a thread frees
    up, its handler writes nothing — so "not recorded" stays true and the person's retry is
    the click that counts."""
    settings.CARDLOOP_LARK_DRY_RUN = True
    settings.CARDLOOP_CALLBACK_BUDGET = 0.3
    delivery = _delivery(lark_bot, "turn-busy")
    release = threading.Event()
    blockers = [
        dispatcher.POOL.submit(release.wait, 30) for _ in range(settings.CARDLOOP_CALLBACK_THREADS)
    ]
    try:
        answer = dispatcher.handle_card_action(lark_bot, _click_body(delivery, "ev-busy"))
    finally:
        release.set()
    for blocker in blockers:
        blocker.result(10)
    dispatcher.POOL.submit(lambda: None).result(10)  # the queued click has run by now
    toast = answer["toast"]
    assert toast["type"] == "warning"
    assert "busy" in toast["i18n"]["en_us"] and "database" not in toast["i18n"]["en_us"]
    assert toast["i18n"]["zh_cn"] != toast["i18n"]["en_us"]
    assert not InboundEvent.objects.filter(event_id="ev-busy").exists()
    assert not Revision.objects.filter(delivery=delivery).exists()

    settings.CARDLOOP_CALLBACK_BUDGET = 5.0
    retried = dispatcher.handle_card_action(lark_bot, _click_body(delivery, "ev-busy-retry"))
    assert retried["toast"]["type"] == "success", retried
    assert Revision.objects.filter(delivery=delivery).count() == 1
