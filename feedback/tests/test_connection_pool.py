"""PostgreSQL connections under a real Daphne process: concurrent feedback clicks share the
process's connection pool (`DATABASE_POOL_*`), every click is answered and the number of
server connections stays within the pool's size.

Before the pool, each Daphne request thread and each handler thread kept (or opened) a
connection of its own: at concurrency 32 PostgreSQL answered "too many clients already" and
callbacks failed with 500 (bench/README.md, "Feedback callback load"). With `DATABASE_POOL=false`
this test fails on the connection count.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from django.db import connection

from botadmin import services
from feedback import deliveries
from feedback.models import Revision
from interactions.lark.signing import seal
from tests import feishu
from tests.processes import child_env, wait_until_serving

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 6
CONCURRENCY = 40
CLICKS = 120
APP_NAME = "cardloop-pool-test"


@pytest.fixture
def pooled_daphne(lark_bot, tmp_path):
    """Daphne on an ephemeral port with a pool of `POOL_SIZE` connections, its connections
    named `APP_NAME` (libpq's PGAPPNAME) so they can be counted; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = child_env(
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DATABASE_POOL_MAX_SIZE=str(POOL_SIZE),
        PGAPPNAME=APP_NAME,
        CARDLOOP_LOG_LEVEL="WARNING",
    )
    log_path = tmp_path / "daphne.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "cardloop.asgi:application"],
        env=env,
        pass_fds=[sock.fileno()],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    sock.close()
    try:
        wait_until_serving(f"{url}/healthz", process, log_path)
        yield url
    finally:
        process.terminate()
        process.wait(15)
        log.close()


def _server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [APP_NAME],
        )
        return cursor.fetchone()[0]


def _sealed_click(delivery, operator: str) -> tuple[bytes, dict[str, str]]:
    body = feishu.payload(
        "card_action_feedback_click",
        {
            "event.action.value.delivery": delivery.delivery_id,
            "event.action.value.key": "conclusive_usable",
            "event.action.value.rev": "",
            "event.operator.open_id": operator,
            "event.context.open_message_id": delivery.platform_message_id,
            "event.context.open_chat_id": "oc_pool",
        },
    )
    return seal(body, encrypt_key=feishu.ENCRYPT_KEY)


async def _send_all(url: str, sealed: list[tuple[bytes, dict[str, str]]]) -> list[tuple[int, dict]]:
    queue = list(sealed)
    answers: list[tuple[int, dict]] = []
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(
        base_url=url, limits=limits, timeout=30, trust_env=False
    ) as client:

        async def worker():
            while queue:
                raw, headers = queue.pop()
                response = await client.post(
                    f"/lark/{feishu.APP_ID}/callback", content=raw, headers=headers
                )
                body = response.json() if "json" in response.headers.get("content-type", "") else {}
                answers.append((response.status_code, body))

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return answers


def test_concurrent_clicks_under_daphne_share_a_bounded_pool_and_all_get_answers(
    pooled_daphne, lark_bot, settings
):
    settings.CARDLOOP_LARK_DRY_RUN = True
    services.set_policy_layer("test", lark_bot, {"enabled": True, "allow_reselect": True})
    card = {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": "answer"}]},
    }
    sealed = []
    for i in range(CLICKS):
        operator = f"ou_pool_{i}"
        result = deliveries.deliver(
            lark_bot,
            deliveries.DeliveryRequest(
                chat_id="oc_pool",
                card=card,
                response_kind="final",
                session_id="sess-pool",
                turn_id=f"t-{i}",
                requester_open_id=operator,
            ),
        )
        sealed.append(_sealed_click(result.delivery, operator))

    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        from django.db import connection as sampler_connection

        try:
            while not done.is_set():
                peak = max(peak, _server_connections())
                time.sleep(0.02)
        finally:
            sampler_connection.close()

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        answers = asyncio.run(_send_all(pooled_daphne, sealed))
    finally:
        done.set()
        sampler.join()

    assert len(answers) == CLICKS
    assert [status for status, _body in answers if status != 200] == []
    # a click past the 2 s budget on a loaded machine is answered "still working" (info);
    # every other answer is the success toast
    assert {body["toast"]["type"] for _status, body in answers} <= {"success", "info"}
    deadline = time.monotonic() + 30
    while Revision.objects.filter(delivery__session_id="sess-pool").count() < CLICKS:
        assert time.monotonic() < deadline, "not every click wrote its revision"
        time.sleep(0.2)
    assert Revision.objects.filter(delivery__session_id="sess-pool").count() == CLICKS
    assert 0 < peak <= POOL_SIZE, f"{peak} server connections for a pool of {POOL_SIZE}"


def _health_checks(monkeypatch) -> list[int]:
    """Count psycopg_pool's health checks (`ConnectionPool.check_connection` runs the empty
    query on the connection being checked out)."""
    import psycopg

    checks: list[int] = []
    real = psycopg.Connection.execute

    def execute(self, query, *args, **kwargs):
        if query == "":
            checks.append(1)
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return checks


def _given_back():
    """Check a connection out of the process's pool, use it, give it back; returns the psycopg
    connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
    raw = connection.connection
    connection.close()  # back to the pool
    return raw


def test_a_connection_given_back_a_moment_ago_is_handed_out_again_without_a_health_check(
    monkeypatch,
):
    from psycopg_pool import ConnectionPool

    from plumbing.db import pool as pool_rules

    raw = _given_back()  # the pool's reset callback noted it
    checks = _health_checks(monkeypatch)
    ConnectionPool.check_connection(raw)  # what the pool runs when it hands it out again
    assert checks == []  # a click's handler thread pays no round trip for the check
    monkeypatch.setattr(pool_rules, "RECENT_RETURN", 0.05)
    time.sleep(0.1)
    ConnectionPool.check_connection(raw)
    assert checks == [1]  # a while later it is checked as before


def test_after_a_database_error_every_pooled_connection_is_checked_again(monkeypatch):
    from psycopg_pool import ConnectionPool

    from plumbing.db import transient

    raw = _given_back()
    checks = _health_checks(monkeypatch)
    transient.reset_connection()  # what every transient database error leads to
    ConnectionPool.check_connection(raw)
    assert checks == [1]
    raw = _given_back()  # the pool's checkout checks it (the error's generation is older)
    assert checks == [1, 1]
    ConnectionPool.check_connection(raw)
    assert checks == [1, 1]  # given back healthy after the error: trusted again
