"""`python manage.py serve`: run Cardloop in one terminal — Daphne (HTTP + WebSocket) and every
worker command that exists (card updates, webhook outbox) as child processes.

Ctrl-C or SIGTERM stops all children (workers get SIGTERM and finish their in-flight work); if
one child exits, the others are stopped too and the exit code is non-zero, so a supervisor sees
the failure instead of a half-running service.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from django.core.management import get_commands
from django.core.management.base import BaseCommand

#: Worker commands started beside the web server when they are installed.
WORKER_COMMANDS = ["card_worker", "outbox_worker"]


class Command(BaseCommand):
    help = "Run the web server (Daphne) and the workers together in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-workers", action="store_true", help="Run only the web server.")

    def handle(self, *args, host, port, no_workers, **options):
        python = sys.executable
        manage = [python, os.path.abspath(sys.argv[0])]
        children: dict[str, subprocess.Popen] = {}
        children["web"] = subprocess.Popen(
            [python, "-m", "botadmin.webserver", "-b", host, "-p", str(port)]
            + ["botadmin.asgi:application"]
        )
        if not no_workers:
            available = get_commands()
            for name in WORKER_COMMANDS:
                if name in available:
                    children[name] = subprocess.Popen([*manage, name])
        base = f"http://{host}:{port}"
        self.stdout.write(
            self.style.SUCCESS(
                f"Cardloop is starting on {base}/\n"
                f"  admin:     {base}/admin/\n"
                f"  dashboard: {base}/dashboard/\n"
                f"  API docs:  {base}/api/docs/\n"
                f"  processes: {', '.join(children)}\n"
                "Press Ctrl-C to stop."
            )
        )

        stopping = False

        def stop(signum=None, frame=None):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        exit_code = 0
        try:
            while not stopping:
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
        if exit_code:
            sys.exit(exit_code)
