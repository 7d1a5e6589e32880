"""A loopback TCP proxy whose link can be cut and healed, for fault tests and `bench/faults.py`.

It stands between Cardloop and a real server (PostgreSQL, Redis) so a test can take that server
away without stopping anyone's database:

    proxy = TcpProxy("127.0.0.1", 5432).start()     # listens on 127.0.0.1:<proxy.port>
    ...                                              # point DATABASE_URL at proxy.port
    proxy.cut()        # close every open connection (both sides) and refuse new ones
    proxy.heal()       # accept and forward again
    proxy.stop()

`cut(mode="refuse")` closes the listening side's connections and resets new ones at once (what a
client sees when the server's host is up and the port is closed); `cut(mode="blackhole")` accepts
new connections and forwards nothing (a server or network that hangs: clients see only their
own timeouts). Threads only, standard library only; one thread per direction per connection,
which is plenty for a test's few dozen connections.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forward 127.0.0.1:`port` (picked free when 0) to (`target_host`, `target_port`).

    Attributes: `port` (int, the listening port once `start()` returned), `accepted` (int,
    connections accepted since start, cut or not). Thread-safe; `cut`/`heal` may be called
    from any thread and take effect for existing connections at once."""

    def __init__(self, target_host: str, target_port: int, *, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self._mode: str | None = None  # None = forwarding, "refuse", "blackhole"
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="tcpproxy", daemon=True)

    # -- control -------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Start accepting; returns self."""
        self._thread.start()
        return self

    def cut(self, mode: str = "refuse") -> None:
        """Close every open connection and stop forwarding. `mode` is "refuse" (new connections
        are closed at once) or "blackhole" (new connections are accepted and hang).
        Raises ValueError for another mode."""
        if mode not in ("refuse", "blackhole"):
            raise ValueError(f"mode must be 'refuse' or 'blackhole', not {mode!r}")
        with self._lock:
            self._mode = mode
            conns, self._conns = self._conns, set()
        for sock in conns:
            _close(sock)

    def heal(self) -> None:
        """Forward new connections again (connections cut earlier stay closed). Blackholed
        connections accepted during the cut are closed, as a recovering network would."""
        with self._lock:
            self._mode = None
            conns, self._conns = self._conns, set()
        for sock in conns:
            _close(sock)

    @property
    def is_cut(self) -> bool:
        """True between `cut()` and `heal()`."""
        return self._mode is not None

    def stop(self) -> None:
        """Stop accepting and close everything; idempotent."""
        self._stopped.set()
        self.cut()
        _close(self._listener)
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- forwarding ----------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            mode = self._mode
            if mode == "refuse":
                _close(client)
                continue
            if mode == "blackhole":
                with self._lock:
                    self._conns.add(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                if self._mode is not None:  # cut while we were connecting
                    _close(client)
                    _close(upstream)
                    continue
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
