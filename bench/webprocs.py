"""Daphne web processes for a benchmark, started as `manage.py serve --web-processes N` starts
them: `python -m cardloop.webserver --fd <socket> cardloop.asgi:application`, each process on a
listening socket of its own, all on one ephemeral port of 127.0.0.1 with SO_REUSEPORT (the
sockets come from `serve.listening_sockets`), so the kernel spreads new connections over them.

    servers = WebProcesses.start(env, 2, log_path)   # after django.setup(); env: the children's
    try:
        ...  # servers.url is "http://127.0.0.1:<port>"
    finally:
        servers.stop()
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WebProcesses:
    """The running processes (`subprocess.Popen`), their listening sockets, the base URL and
    the log file all of them write to (stdout and stderr)."""

    processes: list[subprocess.Popen]
    url: str
    log_path: Path
    listeners: list = field(default_factory=list)

    @classmethod
    def start(
        cls, env: dict[str, str], count: int, log_path: Path, *, timeout: float = 120.0
    ) -> WebProcesses:
        """Start `count` (≥ 1) processes with environment `env` and wait until `/healthz`
        answers 200 (a process serves the port). Exits the bench with the log's tail when a
        process dies first or nothing answers within `timeout` seconds. More than one process
        needs a channel layer they share (REDIS_URL in `env`); the caller checks that."""
        import httpx

        from cardloop.management.commands.serve import listening_sockets

        listeners = listening_sockets("127.0.0.1", 0, count)
        url = f"http://127.0.0.1:{listeners[0].getsockname()[1]}"
        log = Path(log_path).open("wb")  # noqa: SIM115 - the children hold it; closed below
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "cardloop.webserver", "--fd", str(listener.fileno())]
                + ["cardloop.asgi:application"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(listener.fileno(),),
            )
            for listener in listeners
        ]
        log.close()
        servers = cls(processes, url, Path(log_path), listeners)
        # a connection the kernel hands to a process still loading waits in its backlog: ask
        # on fresh connections until 4 per process in a row were answered within a second
        deadline = time.monotonic() + timeout
        answered = 0
        while True:
            if any(p.poll() is not None for p in processes):
                servers.stop()
                raise SystemExit(servers.log_tail())
            try:
                ok = httpx.get(f"{url}/healthz", timeout=1, trust_env=False).status_code == 200
            except httpx.HTTPError:
                ok = False
            answered = answered + 1 if ok else 0
            if answered >= 4 * count:
                break
            if time.monotonic() > deadline:
                servers.stop()
                raise SystemExit(
                    f"Daphne did not answer within {timeout:.0f} s\n{servers.log_tail()}"
                )
            if not ok:
                time.sleep(0.3)
        return servers

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system, seconds, every thread) the processes have used so far,
        from `/proc/<pid>/stat` (proc(5)); None where there is no /proc (not Linux). Read it
        before and after a phase: the difference ÷ requests is the server's CPU per request,
        a figure the machine's other load moves far less than throughput."""
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = 0
        for process in self.processes:
            try:
                stat = Path(f"/proc/{process.pid}/stat").read_text()
            except OSError:
                return None
            # fields after the parenthesised command name: utime and stime are the 14th
            # and 15th fields of the whole line
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / ticks

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every process, SIGKILL the ones still running after `timeout` seconds, and
        close the listening sockets. Idempotent."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for listener in self.listeners:
            listener.close()
        self.listeners = []
