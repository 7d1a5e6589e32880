"""`/metrics` across processes: two real Daphne processes sharing one multiprocess directory
each report the sum of both processes' counters."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest

from cardloop.tests.metrics_scrape import value
from interactions.lark.signing import seal
from tests import feishu
from tests.processes import child_env, wait_for_child_sessions_to_end, wait_until_serving

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "cmx_two_processes"  # noqa: S105 - test value


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _post(port: int, body: dict, **header_changes) -> httpx.Response:
    raw, headers = seal(body, encrypt_key=feishu.ENCRYPT_KEY)
    headers = {**headers, **header_changes}
    return httpx.post(
        f"http://127.0.0.1:{port}/lark/{feishu.APP_ID}/callback",
        content=raw,
        headers=headers,
        timeout=10,
        trust_env=False,
    )


def _click() -> dict:
    return feishu.payload(
        "card_action_feedback_click", {"event.action.value.delivery": "del_two_processes"}
    )


def _scrape(port: int) -> str:
    response = httpx.get(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    return response.text


def test_two_web_processes_each_report_the_counters_of_both(tmp_path, lark_bot):
    metrics_dir = tmp_path / "metrics"
    env = child_env(
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        CARDLOOP_METRICS_TOKEN=TOKEN,
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
    )
    ports = [_free_port(), _free_port()]
    processes, logs = [], []
    try:
        for n, port in enumerate(ports):
            log_path = tmp_path / f"web{n}.log"
            logs.append(log_path)
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "cardloop.webserver", "-b", "127.0.0.1"]
                    + ["-p", str(port), "cardloop.asgi:application"],
                    env=env,
                    stdout=log_path.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        for port, process, log_path in zip(ports, processes, logs, strict=True):
            wait_until_serving(f"http://127.0.0.1:{port}/healthz", process, log_path)

        for port, clicks, forged in ((ports[0], 3, 1), (ports[1], 2, 2)):
            for _ in range(clicks):
                answer = _post(port, _click())
                assert answer.status_code == 200 and "toast" in answer.json(), answer.text
            for _ in range(forged):
                assert _post(port, _click(), **{"X-Lark-Signature": "0" * 64}).status_code == 401

        for port in ports:
            text = _scrape(port)
            assert (
                value(text, "cardloop_callback_answer_seconds_count", route="http", kind="feedback")
                == 5
            )
            assert value(text, "cardloop_callback_refused_total", reason="invalid_signature") == 3
            assert "del_two_processes" not in text
        # one file per process and kind of metric: both processes wrote their own
        assert len({p.name.rsplit("_", 1)[1] for p in metrics_dir.glob("*.db")}) >= 2
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
        wait_for_child_sessions_to_end()
