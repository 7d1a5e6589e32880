"""The web server `manage.py serve` starts: Daphne with an access log that keeps query strings
(which may carry an `open_id`, e.g. `GET /api/v1/desktop-tokens?open_id=…`) out of the log,
and with the loaded application out of the garbage collector's scans."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.processes import child_env, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)


def test_access_log_shows_the_path_but_never_the_query_string(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    log_path = tmp_path / "web.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cardloop.webserver", "--fd", str(sock.fileno())]
            # -v 2: Daphne hands Twisted's own log to Python logging, which must not get
            # Twisted's access line (full URI) either
            + ["-v", "2", "cardloop.asgi:application"],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1", CARDLOOP_LOG_LEVEL="DEBUG"),
            pass_fds=[sock.fileno()],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sock.close()
        try:
            wait_until_serving(f"{url}/healthz?open_id=ou_secret_probe", process, log_path)
        finally:
            process.terminate()
            process.wait(10)
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
        "print(before, gc.get_freeze_count())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    before, frozen = map(int, done.stdout.split()[-2:])
    assert before == 0
    assert frozen > 100_000  # Django, DRF, Channels and lark-oapi, all loaded


def test_a_post_body_reaches_the_application_unparsed_by_twisted(tmp_path):
    """Twisted parses multipart and URL-encoded POST bodies into `request.args` unless told not
    to (and answers a bare 400 itself when that parse fails); Daphne never reads them, so the
    web server turns it off: a body that is not valid multipart still reaches Django, which
    answers with its own JSON error."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    log_path = tmp_path / "web.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cardloop.webserver", "--fd", str(sock.fileno())]
            + ["cardloop.asgi:application"],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1"),
            pass_fds=[sock.fileno()],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        sock.close()
        try:
            wait_until_serving(f"http://127.0.0.1:{port}/healthz", process, log_path)
            import httpx

            answer = httpx.post(
                f"http://127.0.0.1:{port}/lark/cli_unknown_app/callback",
                content=b"--b\r\nnot a part",
                headers={"Content-Type": "multipart/form-data"},  # no boundary: not multipart
                trust_env=False,
                timeout=30,
            )
        finally:
            process.terminate()
            process.wait(10)
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    assert answer.json()["error"]
