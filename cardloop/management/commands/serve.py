"""`python manage.py serve`: run Cardloop in one terminal — Daphne (HTTP + WebSocket) and every
worker command that exists (card updates, webhook outbox, alerts and review queues) as child processes.

`--web-processes N` (or `CARDLOOP_WEB_PROCESSES`) runs N Daphne processes on the one port, each
with a listening socket of its own (SO_REUSEPORT: the kernel spreads new connections over
them), so a host with N cores serves N requests' Python at once. Several processes need a
channel layer they share (`REDIS_URL`): the in-memory layer reaches one process only.

The URLs are printed once the port answers HTTP (a process serves it), not when the processes
were started: loading the application takes seconds, more on a busy machine. All processes
share one prometheus-client multiprocess directory (`plumbing.metrics`; `PROMETHEUS_MULTIPROC_DIR`
or a temporary one), emptied at start and at exit, so `/metrics` sums every process of this run.

Ctrl-C or SIGTERM stops all children (workers get SIGTERM and finish their in-flight work); if
one child exits, the others are stopped too and the exit code is non-zero, so a supervisor sees
the failure instead of a half-running service.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import get_commands
from django.core.management.base import BaseCommand, CommandError

from plumbing import metrics

#: Worker commands started beside the web server when they are installed.
WORKER_COMMANDS = ["card_worker", "outbox_worker", "alert_worker"]


class Command(BaseCommand):
    help = "Run the web server (Daphne) and the workers together in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-workers", action="store_true", help="Run only the web server.")
        parser.add_argument(
            "--web-processes",
            type=int,
            default=int(os.environ.get("CARDLOOP_WEB_PROCESSES", "1") or 1),
            help="Daphne processes on the port (default 1, or CARDLOOP_WEB_PROCESSES); more "
            "than one needs REDIS_URL.",
        )

    def handle(self, *args, host, port, no_workers, web_processes, **options):
        if web_processes < 1:
            raise CommandError("--web-processes must be at least 1.")
        if web_processes > 1 and not settings.REDIS_URL:
            raise CommandError(
                "--web-processes > 1 needs REDIS_URL: the in-memory channel layer reaches one "
                "process only, so question panels would miss pushes from the others."
            )
        metrics.clear_directory()  # exported to the children; counters start at zero
        python = sys.executable
        manage = [python, os.path.abspath(sys.argv[0])]
        children: dict[str, subprocess.Popen] = {}
        if web_processes == 1:
            children["web"] = subprocess.Popen(
                [python, "-m", "cardloop.webserver", "-b", host, "-p", str(port)]
                + ["cardloop.asgi:application"]
            )
        else:
            for n, listener in enumerate(_listeners(host, port, web_processes), start=1):
                children[f"web{n}"] = subprocess.Popen(
                    [python, "-m", "cardloop.webserver", "--fd", str(listener.fileno())]
                    + ["cardloop.asgi:application"],
                    pass_fds=(listener.fileno(),),
                )
                listener.close()  # the child has its own copy
        if not no_workers:
            available = get_commands()
            for name in WORKER_COMMANDS:
                if name in available:
                    children[name] = subprocess.Popen([*manage, name])
        base = f"http://{host}:{port}"
        self.stdout.write(f"Starting Cardloop ({', '.join(children)}) ...")
        self.stdout.flush()
        banner = self.style.SUCCESS(
            f"Cardloop is listening on {base}/\n"
            f"  admin:     {base}/admin/\n"
            f"  dashboard: {base}/dashboard/\n"
            f"  API docs:  {base}/api/docs/\n"
            f"  metrics:   {base}/metrics\n"
            f"  processes: {', '.join(children)}\n"
            "Press Ctrl-C to stop."
        )
        announced = False

        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        exit_code = 0
        try:
            while not stopping:
                if not announced and _answers(host, port):
                    announced = True
                    self.stdout.write(banner)
                    self.stdout.flush()
                for name, proc in children.items():
                    if proc.poll() is not None:
                        self.stderr.write(f"{name} exited with status {proc.returncode}; stopping.")
                        exit_code = proc.returncode or 1
                        stopping = True
                        break
                time.sleep(0.3)
        finally:
            for proc in children.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for proc in children.values():
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
            metrics.clear_directory()
        if exit_code:
            sys.exit(exit_code)


def _answers(host: str, port: int) -> bool:
    """Whether an HTTP server answers on (`host`, `port`) — any status counts (a Host not in
    ALLOWED_HOSTS gets 400, still an answer). A wildcard address is probed on loopback. A
    connection accepted into a pre-bound socket's backlog (`--web-processes`) that nobody
    serves yet times out after a second: not answering."""
    wildcard = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - probed, not bound
    target = wildcard.get(host, host.strip("[]"))
    connection = http.client.HTTPConnection(target, port, timeout=1.0)
    try:
        connection.request("GET", "/healthz")
        connection.getresponse().read()
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
    return True


def _listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening TCP sockets on (`host`, `port`) with SO_REUSEPORT (Linux, BSD, macOS).
    Raises CommandError when the address cannot be bound or something already listens there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # SO_REUSEPORT would also join sockets another process (an old or second `serve`) already
    # listens on, which then silently takes part of the traffic: a plain bind first fails there
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sockets = []
    try:
        for _ in range(count):
            listener = socket.socket(family, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            listener.bind((host, port))
            listener.listen(1024)
            listener.set_inheritable(True)
            sockets.append(listener)
    except (OSError, AttributeError) as exc:
        for listener in sockets:
            listener.close()
        raise CommandError(f"cannot listen on {host}:{port} with SO_REUSEPORT: {exc}") from exc
    return sockets
