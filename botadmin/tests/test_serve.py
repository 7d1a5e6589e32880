"""`manage.py serve --web-processes N`: several Daphne processes on one port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.core.management import CommandError, call_command

from tests.processes import child_env, wait_for_child_sessions_to_end, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE = str(Path(__file__).resolve().parents[2] / "manage.py")


def test_several_web_processes_without_redis_are_refused(settings):
    settings.REDIS_URL = ""
    with pytest.raises(CommandError, match="REDIS_URL"):
        call_command("serve", web_processes=2, no_workers=True)


def test_zero_web_processes_are_refused():
    with pytest.raises(CommandError, match="at least 1"):
        call_command("serve", web_processes=0, no_workers=True)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs Redis (REDIS_URL)")
def test_two_web_processes_share_the_port_and_one_that_dies_is_restarted_on_it(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, MANAGE, "serve", "--no-workers", "--web-processes", "2"]
            + ["--port", str(port)],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_serving(f"http://127.0.0.1:{port}/healthz", serve, log_path)
            webs = _children(serve.pid)
            assert len(webs) == 2, log_path.read_text()[-2000:]
            for _ in range(20):  # a new connection each time: the kernel picks a process
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            os.kill(webs[0], signal.SIGKILL)
            deadline = time.monotonic() + 60
            while not (len(now := _children(serve.pid)) == 2 and webs[0] not in now):
                assert serve.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, log_path.read_text()[-2000:]
                time.sleep(0.2)
            wait_until_serving(f"http://127.0.0.1:{port}/healthz", serve, log_path)
            for _ in range(20):  # both processes take connections again, on the same port
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(30) == 0
        finally:
            if serve.poll() is None:
                serve.terminate()
                serve.wait(20)
    wait_for_child_sessions_to_end()
    output = log_path.read_text()
    assert f"(pid {webs[0]}) exited with status -9" in output and " restarted (pid " in output


def test_several_web_processes_refuse_a_port_something_already_listens_on():
    from cardloop.management.commands.serve import listening_sockets

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first = listening_sockets("127.0.0.1", port, 2)  # a running `serve --web-processes 2`
    try:
        with pytest.raises(CommandError, match="cannot listen"):
            listening_sockets("127.0.0.1", port, 2)  # an old one left running, or a second start
    finally:
        for listener in first:
            listener.close()


def test_listening_sockets_on_port_zero_share_one_free_port():
    from cardloop.management.commands.serve import listening_sockets

    sockets = listening_sockets("127.0.0.1", 0, 3)  # how the benches start their processes
    try:
        ports = {listener.getsockname()[1] for listener in sockets}
        assert len(sockets) == 3 and len(ports) == 1 and ports != {0}
        assert all(listener.get_inheritable() for listener in sockets)
    finally:
        for listener in sockets:
            listener.close()
