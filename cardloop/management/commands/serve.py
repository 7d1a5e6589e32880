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

A child that dies (crash, OOM kill, SIGKILL) is restarted on its own — the others keep running
— after a backoff of 1 s doubling to 30 s, reset to 1 s once the child had run `STABLE_AFTER`
seconds; each exit is logged on stderr with the child's name, pid and exit status. A restarted
web process reuses the same listening socket (`--web-processes`) or binds the port again.
Ctrl-C or SIGTERM stops all children (workers get SIGTERM and finish their in-flight work;
a child still running 10 s later is killed) and `serve` exits 0.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.management import get_commands
from django.core.management.base import BaseCommand, CommandError

from plumbing import metrics

#: Worker commands started beside the web server when they are installed.
WORKER_COMMANDS = ["card_worker", "outbox_worker", "alert_worker"]
#: Restart backoff of a child that died: first delay, cap (seconds).
FIRST_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
#: A child that ran this many seconds before dying counts as stable: its backoff starts over.
STABLE_AFTER = 60.0
#: Seconds between two looks at the children.
POLL_INTERVAL = 0.3


def restart_delay(previous: float | None, ran_for: float) -> float:
    """Seconds to wait before restarting a child that died after running `ran_for` seconds,
    when its previous restart waited `previous` seconds (None: never restarted): 1 s, doubling
    at each quick death up to 30 s, back to 1 s after a run of `STABLE_AFTER` seconds."""
    if previous is None or ran_for >= STABLE_AFTER:
        return FIRST_RESTART_DELAY
    return min(MAX_RESTART_DELAY, previous * 2)


@dataclass
class Child:
    """One supervised child: its command line, the fds it inherits, and its restart state."""

    name: str
    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    delay: float | None = None  # the last restart delay (None: not restarted yet)
    restart_at: float | None = None  # monotonic time of the pending restart
    restarts: int = 0

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, pass_fds=self.pass_fds)
        self.started_at = time.monotonic()
        self.restart_at = None

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


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
        children: list[Child] = []
        listeners: list[socket.socket] = []  # kept open: a restarted web process reuses its own
        if web_processes == 1:
            children.append(
                Child(
                    "web",
                    [python, "-m", "cardloop.webserver", "-b", host, "-p", str(port)]
                    + ["cardloop.asgi:application"],
                )
            )
        else:
            listeners = listening_sockets(host, port, web_processes)
            for n, listener in enumerate(listeners, start=1):
                children.append(
                    Child(
                        f"web{n}",
                        [python, "-m", "cardloop.webserver", "--fd", str(listener.fileno())]
                        + ["cardloop.asgi:application"],
                        pass_fds=(listener.fileno(),),
                    )
                )
        if not no_workers:
            available = get_commands()
            for name in WORKER_COMMANDS:
                if name in available:
                    children.append(Child(name, [*manage, name]))
        for child in children:
            child.start()
        names = ", ".join(child.name for child in children)
        base = f"http://{host}:{port}"
        self.stdout.write(f"Starting Cardloop ({names}) ...")
        self.stdout.flush()
        banner = self.style.SUCCESS(
            f"Cardloop is listening on {base}/\n"
            f"  admin:     {base}/admin/\n"
            f"  dashboard: {base}/dashboard/\n"
            f"  API docs:  {base}/api/docs/\n"
            f"  metrics:   {base}/metrics\n"
            f"  processes: {names}\n"
            "Press Ctrl-C to stop."
        )
        announced = False

        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping:
                if not announced and _answers(host, port):
                    announced = True
                    self.stdout.write(banner)
                    self.stdout.flush()
                self._supervise(children)
                time.sleep(POLL_INTERVAL)
        finally:
            running = [c.process for c in children if c.running()]
            for proc in running:
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            for proc in running:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for listener in listeners:
                listener.close()
            metrics.clear_directory()

    def _supervise(self, children: list[Child]) -> None:
        """Schedule the restart of each child that exited (logging it) and restart the ones
        whose backoff has passed."""
        now = time.monotonic()
        for child in children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    child.start()
                    self.stderr.write(
                        f"{child.name} restarted (pid {child.process.pid}, "
                        f"restart {child.restarts})"
                    )
                continue
            if child.running():
                continue
            child.delay = restart_delay(child.delay, now - child.started_at)
            child.restart_at = now + child.delay
            self.stderr.write(
                f"{child.name} (pid {child.process.pid}) exited with status "
                f"{child.process.returncode}; restarting in {child.delay:.0f} s"
            )
            self.stderr.flush()


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


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening TCP sockets on (`host`, `port`) with SO_REUSEPORT (Linux, BSD, macOS),
    inheritable, backlog 1024: hand one to each web process (`--fd`) and the kernel spreads new
    connections over them. Port 0: the first socket takes a free ephemeral port and the others
    join it (read it from `sockets[0].getsockname()[1]`); the benches start their Daphne
    processes this way. Raises CommandError when the address cannot be bound or something
    already listens there. The caller closes the sockets."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # SO_REUSEPORT would also join sockets another process (an old or second `serve`) already
    # listens on, which then silently takes part of the traffic: a plain bind first fails there
    if port:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise CommandError(
                    f"cannot listen on {host}:{port}: {exc.strerror or exc}"
                ) from exc
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
            port = listener.getsockname()[1]  # port 0: the others join the one picked
    except (OSError, AttributeError) as exc:
        for listener in sockets:
            listener.close()
        raise CommandError(f"cannot listen on {host}:{port} with SO_REUSEPORT: {exc}") from exc
    return sockets
