"""`manage.py serve` start-up: the URLs are printed once the port answers, and the metrics
directory its processes share is emptied at start and at exit."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.processes import child_env, wait_for_child_sessions_to_end

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE = str(Path(__file__).resolve().parents[2] / "manage.py")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _lines(stream) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump():
        for raw in iter(stream.readline, b""):
            lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _children(pid: int) -> set[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return {int(p) for p in path.read_text().split()} if path.exists() else set()


def test_serve_prints_its_urls_only_when_the_port_answers_and_clears_the_metrics_files(
    tmp_path,
):
    port = _free_port()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    stale = metrics_dir / "counter_4242.db"  # left by an earlier run: must not be added in
    stale.write_bytes(b"\0" * 16)
    serve = subprocess.Popen(
        [sys.executable, MANAGE, "serve", "--port", str(port)],
        env=child_env(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), DJANGO_ALLOWED_HOSTS="127.0.0.1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    seen: list[str] = []
    try:
        lines = _lines(serve.stdout)
        deadline = time.monotonic() + 120
        while True:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "".join(seen)[-3000:]
            seen.append(line)
            if f"http://127.0.0.1:{port}/" in line:
                break
        # the moment the URL is printed, the server answers
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        assert "is listening on" in line
        assert any(s.startswith("Starting Cardloop (web, card_worker") for s in seen), seen
        assert not stale.exists()
        time.sleep(2)  # the workers load their metrics once started
        pids = {int(p.stem.rsplit("_", 1)[1]) for p in metrics_dir.glob("*.db")}
        children = _children(serve.pid)
        assert len(pids & children) >= 2, (pids, children)  # the web process and workers
    finally:
        serve.terminate()
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
        wait_for_child_sessions_to_end()
    assert serve.returncode == 0
    assert not list(metrics_dir.glob("*.db"))
