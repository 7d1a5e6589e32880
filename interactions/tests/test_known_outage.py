"""While the database is known to be gone, requests fail at once instead of queueing, and the
first request after its return succeeds (`plumbing.db.outage`).

Real parts: a Daphne child on the test database, PostgreSQL cut through the loopback proxy of
`tests/tcpproxy.py`, SQLite write-locked by this test process (another process than the
child's). No wall-clock assertions: a request "never waited in the pool's line" is shown by a
pool wait (`DATABASE_POOL_TIMEOUT`) far longer than the client's own timeout, and "cleared
after the heal without a request" by `/readyz`'s `outage_known`, which its check never
changes."""

from __future__ import annotations

import sqlite3
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from django.db import connection

from feedback.models import Revision
from interactions.models import InboundEvent
from interactions.tests.test_click_durability import (
    _child_env,
    _delivery,
    _locked_delivery,
    _post,
    _retry_until_answered,
    _sealed_click,
    _start_daphne,
    _stop,
    _toast,
    _wait_claimed,
)
from plumbing.db import outage
from tests.processes import wait_for_child_sessions_to_end
from tests.tcpproxy import TcpProxy

pytestmark = pytest.mark.django_db(transaction=True)

#: The pool wait of the children cut below: any request that queued for the pool would hold
#: its client far past `CLIENT_TIMEOUT`.
LONG_POOL_WAIT = "120"
#: The client's timeout for requests made while the database is cut (seconds).
CLIENT_TIMEOUT = 30


def _readyz_database(url: str) -> dict:
    return httpx.get(f"{url}/readyz", trust_env=False, timeout=CLIENT_TIMEOUT).json()["checks"][
        "database"
    ]


def _wait_outage_known(url: str, known: bool, timeout: float = 60.0) -> None:
    """Poll `/readyz` (whose check uses a connection of its own and never sets or clears the
    known outage) until the child's `outage_known` is `known`."""
    deadline = time.monotonic() + timeout
    while _readyz_database(url)["outage_known"] is not known:
        assert time.monotonic() < deadline, f"outage_known never became {known}"
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# The state itself (no database needed)
# ---------------------------------------------------------------------------------------------


def test_a_failed_connect_makes_the_outage_known_and_a_successful_probe_clears_it(settings):
    settings.DATABASE_PROBE_INTERVAL = 0.05
    reachable = threading.Event()
    hooks = []

    def probe():
        if not reachable.is_set():
            raise ConnectionRefusedError("still down")

    outage.watch("outage_probe_test", probe=probe, on_down=hooks.append)
    assert not outage.is_down("outage_probe_test")
    outage.raise_if_down("outage_probe_test")  # nothing known: no error

    error = ConnectionRefusedError("refused")
    outage.connect_failed("outage_probe_test", error)
    assert outage.is_down("outage_probe_test")
    assert hooks == [error]
    with pytest.raises(outage.DatabaseUnavailable):
        outage.raise_if_down("outage_probe_test")
    changes = outage.changes("outage_probe_test")
    assert not outage.wait_for("outage_probe_test", down=False, timeout=0.3)  # probes fail

    reachable.set()  # the database is back: the probe alone clears the state
    assert outage.wait_for("outage_probe_test", down=False, timeout=10)
    assert outage.changes("outage_probe_test") == changes + 1
    outage.raise_if_down("outage_probe_test")

    outage.connect_failed("outage_probe_test", error)  # a second outage starts a new probe
    assert outage.wait_for("outage_probe_test", down=False, timeout=10)


# ---------------------------------------------------------------------------------------------
# PostgreSQL through the proxy
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def cut_child(lark_bot, tmp_path, settings):
    """A Daphne child on PostgreSQL through a `TcpProxy` this test controls, with a pool wait
    of `LONG_POOL_WAIT` seconds; yields `.url`, `.proxy`, `.log_path`."""
    settings.CARDLOOP_LARK_DRY_RUN = True
    db = connection.settings_dict
    proxy = TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)).start()
    # no bot cache: a click during the cut must find the database gone at its bot lookup
    env = _child_env(DATABASE_POOL_TIMEOUT=LONG_POOL_WAIT, CARDLOOP_BOT_CACHE_SECONDS="0")
    env["DATABASE_URL"] = env["DATABASE_URL"].replace(f":{db['PORT'] or 5432}/", f":{proxy.port}/")
    log_path = tmp_path / "daphne.log"
    url, process, log = _start_daphne(env, log_path)
    try:
        yield SimpleNamespace(url=url, proxy=proxy, log_path=log_path)
    finally:
        proxy.heal()
        _stop(process, log)
        proxy.stop()
        wait_for_child_sessions_to_end()


@pytest.mark.postgres
def test_during_a_cut_requests_fail_at_once_and_the_probe_ends_the_outage_after_the_heal(
    cut_child, lark_bot, make_api_key
):
    raw_key, _key = make_api_key(lark_bot)
    auth = {"Authorization": f"Bearer {raw_key}"}
    ask_url = f"{cut_child.url}/api/v1/asks/ask_missing"
    assert httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code == 404
    assert _readyz_database(cut_child.url)["outage_known"] is False

    cut_child.proxy.cut()
    # the first request meets the dead pooled connections; the pool's failed reconnect makes
    # the outage known and fails the request waiting for it (else: LONG_POOL_WAIT seconds)
    first = httpx.get(ask_url, headers=auth, trust_env=False, timeout=CLIENT_TIMEOUT)
    assert first.status_code == 503
    assert first.json()["error"] == "database_unavailable"
    _wait_outage_known(cut_child.url, True)
    for _ in range(5):  # known: none of these queues for the pool
        response = httpx.get(ask_url, headers=auth, trust_env=False, timeout=CLIENT_TIMEOUT)
        assert response.status_code == 503
        assert response.json()["error"] == "database_unavailable"
        assert response.headers["Retry-After"] == "2"
    click = _post(cut_child.url, _sealed_click(_delivery(lark_bot, "t-known"), "evt_known_cut"))
    assert click.status_code == 503 and click.json()["error"] == "database_unavailable"

    cut_child.proxy.heal()
    _wait_outage_known(cut_child.url, False)  # cleared with no API request or click sent
    assert httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code == 404
    delivery = _delivery(lark_bot, "t-after-heal")
    toast = _toast(_post(cut_child.url, _sealed_click(delivery, "evt_after_heal")))
    assert toast["type"] == "success"  # the first click after the heal is recorded at once
    assert Revision.objects.filter(delivery=delivery).count() == 1


@pytest.mark.postgres
def test_a_pool_whose_connections_are_all_in_use_answers_503_busy_not_unavailable(
    lark_bot, make_api_key, tmp_path, settings
):
    settings.CARDLOOP_LARK_DRY_RUN = True
    raw_key, _key = make_api_key(lark_bot)
    auth = {"Authorization": f"Bearer {raw_key}"}
    env = _child_env(
        DATABASE_POOL_MIN_SIZE="1", DATABASE_POOL_MAX_SIZE="1", DATABASE_POOL_TIMEOUT="1"
    )
    url, process, log = _start_daphne(env, tmp_path / "daphne.log")
    ask_url = f"{url}/api/v1/asks/ask_missing"
    delivery = _delivery(lark_bot, "t-busy-pool")
    try:
        assert httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code == 404
        with _locked_delivery(delivery):
            # the click's handler waits for the row lock holding the pool's one connection
            clicker = threading.Thread(
                target=_post, args=(url, _sealed_click(delivery, "evt_busy_pool"))
            )
            clicker.start()
            _wait_claimed("evt_busy_pool")
            response = httpx.get(ask_url, headers=auth, trust_env=False, timeout=CLIENT_TIMEOUT)
            assert response.status_code == 503
            assert response.json()["error"] == "busy"
            assert response.headers["Retry-After"] == "2"
            database = _readyz_database(url)  # the database itself is fine
            assert database["ok"] is True and database["outage_known"] is False
        clicker.join(30)
        assert httpx.get(ask_url, headers=auth, trust_env=False, timeout=10).status_code == 404
    finally:
        _stop(process, log)
        wait_for_child_sessions_to_end()
    assert Revision.objects.filter(delivery=delivery).count() == 1


# ---------------------------------------------------------------------------------------------
# SQLite write-locked by another process
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write lock")
def test_clicks_behind_another_process_write_lock_are_asked_to_try_again_and_their_retry_records(
    lark_bot, tmp_path, settings
):
    settings.CARDLOOP_LARK_DRY_RUN = True
    env = _child_env(DATABASE_LOCK_WAIT="1")
    url, process, log = _start_daphne(env, tmp_path / "daphne.log")
    first, second = _delivery(lark_bot, "t-lock-1"), _delivery(lark_bot, "t-lock-2")
    sealed = [_sealed_click(first, "evt_lock_first"), _sealed_click(second, "evt_lock_second")]
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        assert _readyz_database(url)["outage_known"] is False
        holder.execute("BEGIN IMMEDIATE")
        answers = [_toast(_post(url, sealed[0]))]  # waits DATABASE_LOCK_WAIT: then known
        assert _readyz_database(url)["outage_known"] is True
        answers.append(_toast(_post(url, sealed[1])))  # known locked: asked at once
        for toast in answers:
            assert toast["type"] == "warning"  # never "still working" (info) for these
            assert "try again" in toast["i18n"]["en_us"]
        holder.execute("ROLLBACK")
        _wait_outage_known(url, False)  # the child's probe took the lock: no click needed
        for one in sealed:
            assert _retry_until_answered(url, one)["type"] == "success"
    finally:
        holder.close()
        _stop(process, log)
    assert Revision.objects.filter(delivery=first).count() == 1
    assert Revision.objects.filter(delivery=second).count() == 1
    for event_id in ("evt_lock_first", "evt_lock_second"):
        assert InboundEvent.objects.get(event_id=event_id).status == InboundEvent.Status.ANSWERED
