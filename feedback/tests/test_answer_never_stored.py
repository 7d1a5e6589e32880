"""The answer's body never reaches the database: a sentinel string sent in the
caller's card is searched for in the raw SQLite file (with its WAL) and, on PostgreSQL, in a
dump of every table's rows, after every path that handles the card has run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from feedback.models import Delivery, Revision
from feedback.tests.conftest import answer_card, drain_card_updates

pytestmark = pytest.mark.django_db(transaction=True)

SENTINEL = "SENTINEL-7f3c-answer-body"
SENTINEL_ZH = "哨兵答案正文"


def sentinel_card() -> dict:
    card = answer_card(f"**{SENTINEL}** {SENTINEL_ZH}")
    card["header"]["title"]["content"] = f"{SENTINEL} title"
    card["config"]["summary"] = {"content": f"{SENTINEL} summary"}
    card["body"]["elements"].append(
        {
            "tag": "button",
            "text": {"tag": "plain_text", "content": f"{SENTINEL} link"},
            "behaviors": [{"type": "open_url", "default_url": f"https://example.com/{SENTINEL}"}],
        }
    )
    return card


def _forms(text: str) -> list[bytes]:
    return [
        text.encode("utf-8"),
        json.dumps(text).strip('"').encode("ascii"),  # \uXXXX-escaped (JSON columns)
        text.encode("utf-16-le"),
    ]


def _exercise_every_path(feedback_api, click, lark_stub):
    # sent, retried, progress, send failure + resend, two-phase registration
    sent = feedback_api.deliver(card=sentinel_card(), session_id="s-sent", turn_id="t-1").json()
    feedback_api.deliver(card=sentinel_card(), session_id="s-sent", turn_id="t-1")
    feedback_api.deliver(card=sentinel_card(), response_kind="progress")
    lark_stub.fail("POST", "/open-apis/im/v1/messages", code=230002, times=1)
    feedback_api.deliver(card=sentinel_card(), session_id="s-fail", turn_id="t-1")
    feedback_api.deliver(card=sentinel_card(), session_id="s-fail", turn_id="t-1")
    card_id = lark_stub.add_card(sentinel_card(), app_id=feedback_api.bot.app_id)
    feedback_api.deliver(card=sentinel_card(), platform_message_id="om_two_phase", card_id=card_id)
    assert Delivery.objects.filter(status="sent").count() == 4
    # clicks: choice, negative, details, stale, and card updates applied
    delivery = Delivery.objects.get(delivery_id=sent["delivery_id"])
    click(delivery, "conclusive_usable")
    delivery.refresh_from_db()
    click(delivery, "incorrect", rev=delivery.current_revision.revision_id)
    delivery.refresh_from_db()
    click.detail(delivery, delivery.current_revision.revision_id, {"fb_reason": "incomplete"})
    click(delivery, "conclusive_usable", rev="fb_stale")
    drain_card_updates()
    assert Revision.objects.count() == 3
    assert SENTINEL in json.dumps(lark_stub.cards[delivery.card_id].card)  # it did go to Feishu


#: Run in a child process: closing any descriptor of the database file in this process would
#: drop every POSIX lock SQLite holds on it (sqlite.org/howtocorrupt.html §2.2). A worker
#: process could then take itself for the last connection and delete the WAL under the
#: connections this process keeps open (callback handler threads), and every later
#: connection would fail with SQLITE_IOERR_SHORT_READ.
_SCAN = """
import json, sys
from pathlib import Path
name, needles = sys.argv[1], [bytes.fromhex(n) for n in json.loads(sys.argv[2])]
files = [p for p in (Path(name), Path(name + "-wal"), Path(name + "-shm")) if p.exists()]
print(json.dumps({p.name: [n.hex() for n in needles if n in p.read_bytes()] for p in files}))
"""


def _scan(name: Path, needles: list[bytes]) -> dict[str, list[bytes]]:
    """{file name: needles found in it} for the database file, its WAL and shared memory."""
    done = subprocess.run(
        [sys.executable, "-c", _SCAN, str(name), json.dumps([n.hex() for n in needles])],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found = json.loads(done.stdout)
    return {file: [bytes.fromhex(n) for n in hits] for file, hits in found.items()}


def test_answer_text_never_reaches_the_sqlite_file(feedback_api, click, lark_stub):
    if connection.vendor != "sqlite":
        pytest.skip("scans the SQLite file")
    _exercise_every_path(feedback_api, click, lark_stub)
    name = Path(connection.settings_dict["NAME"])
    delivery_id = Delivery.objects.first().delivery_id.encode()
    found = _scan(name, [delivery_id, *_forms(SENTINEL), *_forms(SENTINEL_ZH)])
    assert name.name in found and len(found) >= 2  # the WAL holds the recent pages
    for file, hits in found.items():
        assert set(hits) <= {delivery_id}, f"answer text found in {file}"
    # the scan can find things: the delivery ids are in the file
    assert any(delivery_id in hits for hits in found.values())


@pytest.mark.postgres
def test_answer_text_never_reaches_any_postgresql_table(feedback_api, click, lark_stub):
    _exercise_every_path(feedback_api, click, lark_stub)
    dump = []
    with connection.cursor() as cur:
        for table in connection.introspection.table_names():
            cur.execute(f'SELECT t::text FROM "{table}" t')  # noqa: S608 - introspected names
            dump.extend(row[0] for row in cur.fetchall())
    text = "\n".join(dump)
    assert Delivery.objects.first().delivery_id in text
    for needle in (SENTINEL, SENTINEL_ZH, json.dumps(SENTINEL_ZH).strip('"')):
        assert needle not in text
