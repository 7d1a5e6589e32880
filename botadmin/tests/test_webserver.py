"""The web server `manage.py serve` starts: Daphne with an access log that keeps query strings
(which may carry an `open_id`, e.g. `GET /api/v1/desktop-tokens?open_id=…`) out of the log,
the loaded application out of the garbage collector's scans, POST bodies not parsed by
Twisted, and TCP writes sent at once when nothing is queued."""

from __future__ import annotations

import contextlib
import gc
import socket
import subprocess
import sys

import httpx
import pytest

from cardloop.webserver import GC_THRESHOLDS
from tests.processes import child_env, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)


@contextlib.contextmanager
def _web_server(log_path, *args: str, **env: str):
    """`python -m cardloop.webserver` on a free port of 127.0.0.1 with Daphne arguments `args`
    and extra environment `env`, its output in `log_path`; yields its base URL once it
    serves and stops it on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cardloop.webserver", "--fd", str(sock.fileno())]
            + [*args, "cardloop.asgi:application"],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", **env),
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
            process.wait(10)


def test_access_log_shows_the_path_but_never_the_query_string(tmp_path):
    log_path = tmp_path / "web.log"
    # -v 2: Daphne hands Twisted's own log to Python logging, which must not get Twisted's
    # access line (full URI) either
    with _web_server(log_path, "-v", "2", CARDLOOP_LOG_LEVEL="DEBUG") as url:
        answer = httpx.get(f"{url}/healthz?open_id=ou_secret_probe", trust_env=False, timeout=30)
    assert answer.status_code == 200
    text = log_path.read_text()
    assert '"GET /healthz?…" 200' in text, text[-2000:]
    assert "ou_secret_probe" not in text


def test_everything_loading_the_application_created_is_frozen_before_serving():
    """Else each oldest-generation collection scans ~430 000 long-lived objects with the GIL
    held (270-350 ms without an answer, bench/README.md)."""
    code = (
        "import gc\n"
        "from cardloop.webserver import CommandLine\n"
        "before = gc.get_freeze_count()\n"
        "CommandLine().load_asgi_app('cardloop.asgi:application')\n"
        "print(gc.get_threshold(), before, gc.get_freeze_count())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    thresholds, counts = done.stdout.strip().splitlines()[-1].rsplit(")", 1)
    before, frozen = map(int, counts.split())
    assert before == 0
    assert frozen > 100_000  # Django, DRF, Channels and lark-oapi, all loaded
    # and what serving creates is collected with the server's thresholds, not Python's
    assert thresholds + ")" == str(GC_THRESHOLDS) != str(gc.get_threshold())


def test_a_post_body_reaches_the_application_unparsed_by_twisted(tmp_path):
    """Twisted parses multipart and URL-encoded POST bodies into `request.args` unless told not
    to (and answers a bare 400 itself when that parse fails); Daphne never reads them, so the
    web server turns it off: a body that is not valid multipart still reaches Django, which
    answers with its own JSON error."""
    with _web_server(tmp_path / "web.log") as url:
        answer = httpx.post(
            f"{url}/lark/cli_unknown_app/callback",
            content=b"--b\r\nnot a part",
            headers={"Content-Type": "multipart/form-data"},  # no boundary: not multipart
            trust_env=False,
            timeout=30,
        )
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    assert answer.json()["error"]


class _Reactor:
    """Just what `tcp.Connection` asks of a reactor when it queues a write."""

    def __init__(self):
        self.writers = set()

    def addWriter(self, writer):  # noqa: N802 - Twisted's interface
        self.writers.add(writer)

    def removeWriter(self, writer):  # noqa: N802 - Twisted's interface
        self.writers.discard(writer)


def _connection():
    """A Twisted TCP connection on one end of a socket pair (the other end returned)."""
    from twisted.internet import tcp
    from twisted.internet.protocol import Protocol

    ours, peer = socket.socketpair()
    ours.setblocking(False)
    peer.settimeout(5)
    connection = tcp.Connection(ours, Protocol(), reactor=_Reactor())
    connection.connected = True
    return connection, peer


def test_a_write_with_nothing_queued_reaches_the_socket_at_once(monkeypatch):
    """`send_at_once`: Twisted queues every write until the event loop says the socket is
    writable (two epoll_ctl calls and a loop pass per WebSocket frame); with nothing queued
    the web server sends it at once, without asking the reactor."""
    from twisted.internet import tcp

    from cardloop import webserver

    monkeypatch.setattr(tcp.Connection, "write", tcp.Connection.write)
    webserver.send_at_once()
    connection, peer = _connection()
    connection.write(b"frame one")
    assert peer.recv(100) == b"frame one"
    assert not connection.reactor.writers and not connection._tempDataBuffer


def test_what_the_socket_does_not_take_is_queued_and_later_writes_stay_behind_it(monkeypatch):
    from twisted.internet import tcp

    from cardloop import webserver

    monkeypatch.setattr(tcp.Connection, "write", tcp.Connection.write)
    webserver.send_at_once()
    connection, peer = _connection()
    big = bytes(range(256)) * 40_000  # ~10 MB: more than the socket buffers hold
    connection.write(big)
    assert connection.reactor.writers == {connection}  # the rest waits for the event loop
    connection.write(b"after")
    assert connection._tempDataBuffer[-1] == b"after"  # queued behind, not sent ahead
    received = bytearray()
    while len(received) < len(big) + 5:
        connection.doWrite()
        received += peer.recv(1 << 20)
    assert bytes(received) == big + b"after"
    assert not connection.reactor.writers
