"""`manage.py serve` keeps the service up when a child dies: the child is restarted with a
backoff (1 s doubling to 30 s, reset after a stable run) and a log line, the others keep
running, and SIGTERM still stops everything."""

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

from cardloop.management.commands.serve import (
    FIRST_RESTART_DELAY,
    MAX_RESTART_DELAY,
    STABLE_AFTER,
    restart_delay,
)
from tests.processes import child_env, wait_for_child_sessions_to_end, wait_until_serving

MANAGE = str(Path(__file__).resolve().parents[2] / "manage.py")


def test_restart_delay_doubles_from_one_second_up_to_thirty_while_a_child_keeps_dying():
    delays, previous = [], None
    for _ in range(8):
        previous = restart_delay(previous, ran_for=0.5)
        delays.append(previous)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
    assert (FIRST_RESTART_DELAY, MAX_RESTART_DELAY) == (1, 30)


def test_restart_delay_starts_over_after_a_child_ran_stably():
    assert restart_delay(30.0, ran_for=STABLE_AFTER) == FIRST_RESTART_DELAY
    assert restart_delay(30.0, ran_for=STABLE_AFTER - 1) == MAX_RESTART_DELAY


def _children(pid: int) -> dict[int, str]:
    """Child pid → its command line, joined by spaces."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    found = {}
    for child in path.read_text().split() if path.exists() else []:
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        found[int(child)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def _pid_of(serve_pid: int, needle: str) -> int | None:
    pids = [pid for pid, cmd in _children(serve_pid).items() if needle in cmd]
    return pids[0] if pids else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _wait(condition, what, log_path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n" + log_path.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_child_is_restarted_and_sigterm_then_stops_every_child(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, MANAGE, "serve", "--port", str(port)],
            env=child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1"),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until_serving(f"http://127.0.0.1:{port}/healthz", serve, log_path)
            before = set(_children(serve.pid))
            old_worker = _pid_of(serve.pid, "card_worker")
            assert old_worker is not None, _children(serve.pid)
            os.kill(old_worker, signal.SIGKILL)
            _wait(
                lambda: _pid_of(serve.pid, "card_worker") not in (None, old_worker),
                "card_worker was not restarted",
                log_path,
            )
            assert serve.poll() is None
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            after = set(_children(serve.pid))
            assert before - after == {old_worker}  # the others kept running
            output = log_path.read_text()
            assert f"card_worker (pid {old_worker}) exited with status -9" in output
            assert "card_worker restarted" in output

            serve.send_signal(signal.SIGTERM)
            assert serve.wait(30) == 0
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait(20)
    _wait(
        lambda: not any(_alive(pid) for pid in after),
        "children outlived serve",
        log_path,
        timeout=15,
    )
    wait_for_child_sessions_to_end()
