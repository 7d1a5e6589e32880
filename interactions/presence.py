"""Live question panels: who is connected (presence rows) and pushing messages to them.

- **Presence** (`PanelPresence` rows): created on connect, deleted when the consumer ends (on
  any exit path: a disconnect, but also its channel-layer receive raising when Redis went
  away, which closes the socket with 1011 without a disconnect step), refreshed by the serving
  process every `CARDLOOP_PANEL_HEARTBEAT` s only for consumers whose task still runs.
  `is_connected()` counts only rows refreshed within `CARDLOOP_PANEL_PRESENCE_TTL` s, so a row
  whose socket is gone without cleanup (process died, database down at that moment) stops
  counting after the TTL; any process's heartbeat sweeps such rows.
- **Push.** `push(bot, open_id, message)` sends a message to every panel of the user through
  the channel layer group `group_for(bot, open_id)` (Redis across processes; the in-memory
  layer within one process). Best effort by design: the ASGI spec lets a group send drop
  silently past a channel's capacity, and a client may be reconnecting at that moment; panels
  resync with the database (`interactions.panels.service`), so a lost push only delays one.
  A push reaches each idle consumer of this process directly (its `Receiver` methods),
  without a layer message per panel (`_send_local`). On the in-memory layer that happens at
  once; on a layer shared by processes (Redis) the *process* is the group's member, through
  one layer channel per event loop (`FANOUT`), and fans the one message out to its panels.

Asks push through this module; the panel protocol (authentication, snapshots, answers) is
`interactions.panels.service`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import secrets
import socket
import threading
import weakref
from collections import Counter
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction
from django.utils import timezone

from botadmin.models import Bot
from interactions.models import PanelPresence
from interactions.panel_timing import heartbeat_interval

log = logging.getLogger(__name__)

#: This process, as written on its presence rows (host:pid:nonce).
SERVER_ID = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(3)}"

#: Counters of this process (pushes sent, drops seen, resync repairs): for logs and tests.
STATS: Counter[str] = Counter()


def group_for(bot: Bot | int, open_id: str) -> str:
    """The channel-layer group of one user's panels. Hashed: group names are logged by the
    layers and must be ASCII; an open_id must not appear in them."""
    bot_id = bot if isinstance(bot, int) else bot.pk
    digest = hashlib.sha256(f"{bot_id}:{open_id}".encode()).hexdigest()[:40]
    return f"cardloop.panel.{digest}"


@dataclass(frozen=True)
class PanelUser:
    """Who a panel connection shows questions for: the desktop token's bot and open_id.
    `via` is `"desktop"` (token in a header or subprotocol) or `"web"` (session of `/panel/`).
    `repr()` leaves the open_id out."""

    token_id: int
    bot: Bot
    open_id: str
    via: str

    def __repr__(self) -> str:
        return f"PanelUser(token={self.token_id}, bot={self.bot.app_id}, via={self.via})"


# ---------------------------------------------------------------------------------------------
# Presence
# ---------------------------------------------------------------------------------------------


def register(user: PanelUser, channel_name: str) -> PanelPresence:
    """Record a live panel of `user` served by this process on `channel_name`."""
    now = timezone.now()
    presence, _created = PanelPresence.objects.update_or_create(
        channel_name=channel_name,
        defaults={
            "bot": user.bot,
            "open_id": user.open_id,
            "token_id": user.token_id,
            "server": SERVER_ID,
            "via": user.via,
            "connected_at": now,
            "last_seen_at": now,
        },
    )
    return presence


def unregister(channel_name: str) -> None:
    """Forget the panel on `channel_name` (its socket closed). Idempotent."""
    PanelPresence.objects.filter(channel_name=channel_name).delete()


def refresh(channel_names: list[str]) -> int:
    """Heartbeat of this process: mark its live panels as seen now and delete expired rows of
    any process (one that died without disconnecting). Returns the number refreshed."""
    now = timezone.now()
    refreshed = 0
    names = list(channel_names)
    for start in range(0, len(names), 500):
        refreshed += PanelPresence.objects.filter(
            channel_name__in=names[start : start + 500]
        ).update(last_seen_at=now)
    swept = PanelPresence.objects.expired(now).delete()[0]
    if swept:
        log.info("panel presence: swept %d expired connection(s)", swept)
    return refreshed


def is_connected(bot: Bot, open_id: str) -> bool:
    """Whether `open_id` of `bot` has a live panel in any process (a presence row refreshed
    within `CARDLOOP_PANEL_PRESENCE_TTL` seconds). One indexed query."""
    if not open_id:
        return False
    return PanelPresence.objects.live().of_user(bot, open_id).exists()


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# This process's live panels (for in-memory delivery and the heartbeat)
# ---------------------------------------------------------------------------------------------


class Receiver(Protocol):
    """A live panel of this process that can take a `panel.push` event straight from the
    fan-out (`interactions.panels.consumer.PanelConsumer`), without a channel-layer message
    and the consumer's receive → dispatch round through its task."""

    def takes_push_now(self) -> bool:
        """Whether `push_now` may run at once: it will neither wait for the consumer's lock nor
        overtake a handler in progress. When False the push goes through the channel layer,
        queued behind what the consumer is doing."""

    async def push_now(self, event: dict[str, Any]) -> None:
        """Deliver `event` (a `panel.push`, read only) to the panel."""


class _Live(NamedTuple):
    """One live consumer of this process (`LocalChannels.channels`)."""

    group: str
    loop: asyncio.AbstractEventLoop
    task: asyncio.Task | None
    receiver: Receiver | None


class _Local:
    """Live consumers of this process: channel_name → (group, event loop, the consumer's task,
    its `Receiver` or None), and per group its channels with their loops (so a push finds its
    panels without scanning every channel). Thread-safe. A channel counts as live only while
    its consumer's task runs: the heartbeat drops (and stops refreshing) a channel whose task
    ended without detaching — a consumer whose channel-layer receive raised, or that was
    cancelled."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.channels: dict[str, _Live] = {}
        self.groups: dict[str, dict[str, asyncio.AbstractEventLoop]] = {}
        self.heartbeats: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    def attach(self, channel_name: str, group: str, receiver: Receiver | None = None) -> None:
        """Called by the consumer, in its own task, once its socket is accepted. `receiver`
        (the consumer) takes pushes of the in-memory layer directly (`Receiver`)."""
        loop = asyncio.get_running_loop()
        with self.lock:
            self._forget(channel_name)
            self.channels[channel_name] = _Live(group, loop, asyncio.current_task(), receiver)
            self.groups.setdefault(group, {})[channel_name] = loop
            task = self.heartbeats.get(loop)
            if task is None or task.done():
                self.heartbeats[loop] = loop.create_task(_heartbeat(loop))

    def _forget(self, channel_name: str):
        """Drop `channel_name` from both maps (the caller holds the lock); its entry or None."""
        entry = self.channels.pop(channel_name, None)
        if entry is not None:
            members = self.groups.get(entry.group)
            if members is not None:
                members.pop(channel_name, None)
                if not members:
                    del self.groups[entry.group]
        return entry

    def detach(self, channel_name: str) -> None:
        with self.lock:
            entry = self._forget(channel_name)
            if entry is None:
                return
            loop = entry.loop
            if not any(e.loop is loop for e in self.channels.values()):
                task = self.heartbeats.pop(loop, None)
                if task is not None and task is not asyncio.current_task():
                    task.cancel()

    def on_loop(self, loop) -> list[str]:
        """The live channels served on `loop`; forgets channels whose consumer task ended."""
        with self.lock:
            gone = [n for n, e in self.channels.items() if e.task is not None and e.task.done()]
        for name in gone:
            log.info("panel presence: a consumer ended without its disconnect step")
            self.detach(name)
        with self.lock:
            return [name for name, e in self.channels.items() if e.loop is loop]

    def in_group(
        self, group: str
    ) -> dict[asyncio.AbstractEventLoop, list[tuple[str, Receiver | None]]]:
        """The channels of `group` with their `Receiver` (or None), by the event loop their
        consumers run on."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[str, Receiver | None]]] = {}
        with self.lock:
            for name, loop in self.groups.get(group, {}).items():
                by_loop.setdefault(loop, []).append((name, self.channels[name].receiver))
        return by_loop


LOCAL = _Local()


# ---------------------------------------------------------------------------------------------
# One layer channel per process and event loop (layers shared by processes: Redis)
# ---------------------------------------------------------------------------------------------

#: Key of a fanned-out event that names the group it was sent to (removed before delivery).
GROUP_KEY = "cardloop_group"


def fans_out(layer) -> bool:
    """Whether pushes on `layer` go through this process's fan-out channel (`FANOUT`): every
    layer but the in-memory one, which reaches only this process anyway (`group_send` then
    hands the event to the consumers' loops itself)."""
    return layer is not None and not isinstance(layer, InMemoryChannelLayer)


class _Fanout:
    """This process's member of the panel groups, one per event loop, on a layer shared by
    processes (Redis).

    With each consumer in its user's group, a push to 1000 panels of one user was 1000 layer
    messages, and channels_redis receives each through its process-wide loop (four Redis
    round trips per message: cleanup script, BZPOPMIN, backup ZADD, backup ZPOPMIN), so the
    fan-out cost grew with a large constant per panel. Instead the process's channel (a
    "specific" channel of the layer, received by the same per-process loop) joins the group
    while the process has a panel of that user on this loop; a group send is one message per
    process, and `_listen` delivers it to the local panels (`_send_local`: straight to each
    idle consumer).

    Membership: `join` adds the channel to the group on every connect (a Redis ZADD, which
    also renews channels_redis's `group_expiry`); `leave` discards it once the loop has no
    panel of that group left, then adds it again if a panel of that group connected while the
    discard was on its way, or failed, or was cancelled (`_readd_if_served`; so a join racing
    the last leave never ends outside the group).
    The heartbeat renews the memberships of long-lived panels before `group_expiry`. The
    listener runs while the loop has panels and retries, with a growing pause (at most 5 s),
    when the layer's receive fails (Redis restarting)."""

    def __init__(self) -> None:
        # weak: a finished loop (tests run one per test) leaves no entry behind
        self.channels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.renewed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.listeners: dict[asyncio.AbstractEventLoop, asyncio.Task] = {}

    async def channel(self, layer) -> str:
        """This loop's fan-out channel name (created once per loop and kept: the groups name
        it); starts its listener if it is not running. Call from the loop's own task."""
        loop = asyncio.get_running_loop()
        name = self.channels.get(loop)
        if name is None:
            name = self.channels[loop] = await layer.new_channel()
        task = self.listeners.get(loop)
        if task is None or task.done():
            self.listeners[loop] = loop.create_task(_listen(layer, name, loop))
        return name

    def stop_if_idle(self, loop) -> None:
        """Stop `loop`'s listener once no panel of this process is served on it (a loop that
        ends must not keep a receive of the layer waiting)."""
        with LOCAL.lock:  # consumers of other loops (threads) attach meanwhile
            if any(e.loop is loop for e in LOCAL.channels.values()):
                return
        task = self.listeners.pop(loop, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def renew(self, layer, loop) -> None:
        """Add the loop's channel to every group it serves again once a quarter of the
        layer's `group_expiry` (channels_redis: 86 400 s) has passed since the last renewal,
        so a panel connected for days stays in its group."""
        name = self.channels.get(loop)
        if name is None:
            return
        every = getattr(layer, "group_expiry", 86400) / 4
        now = loop.time()
        last = self.renewed.setdefault(loop, now)
        if now - last < every:
            return
        self.renewed[loop] = now
        with LOCAL.lock:
            groups = {e.group for e in LOCAL.channels.values() if e.loop is loop}
        for group in groups:
            await layer.group_add(group, name)


FANOUT = _Fanout()


async def join(layer, group: str, channel_name: str, receiver: Receiver | None) -> None:
    """A consumer's panel on `channel_name` joins `group` (call from its own task once its
    socket is accepted, before reading its snapshot). On the in-memory layer the consumer's
    channel joins the group; on a shared layer this process's fan-out channel does (`_Fanout`).
    Raises what the layer raises (the consumer then fails its connect, as before)."""
    LOCAL.attach(channel_name, group, receiver)
    if fans_out(layer):
        await layer.group_add(group, await FANOUT.channel(layer))
    else:
        await layer.group_add(group, channel_name)


async def leave(layer, group: str, channel_name: str) -> None:
    """The panel on `channel_name` leaves `group` (idempotent; see `join`). Raises what the
    layer raises; the membership then expires with the layer's `group_expiry`."""
    loop = asyncio.get_running_loop()
    LOCAL.detach(channel_name)
    if not fans_out(layer):
        await layer.group_discard(group, channel_name)
        return
    name = FANOUT.channels.get(loop)
    try:
        if name is not None and not _serves(group, loop):
            try:
                await layer.group_discard(group, name)
            except BaseException:
                _readd_if_served(layer, group, name, loop)  # not awaited: we may be cancelled
                raise
            readd = _readd_if_served(layer, group, name, loop)
            if readd is not None:
                await asyncio.shield(readd)
    finally:
        FANOUT.stop_if_idle(loop)


def _readd_if_served(layer, group: str, name: str, loop) -> asyncio.Task | None:
    """After `leave`'s discard of the fan-out channel `name` from `group` (done, failed or
    cancelled): if a panel of the group connected on `loop` meanwhile, add the channel back,
    in a task of its own (returned; None when no panel connected). Redis may have applied the
    discard after that panel's add; the consumer gives its leave 2 s, and cancelling the leave
    must not cancel the add, or the panel would get no push until the group's renewal."""
    if not _serves(group, loop):
        return None
    task = loop.create_task(layer.group_add(group, name))
    _pending.add(task)
    task.add_done_callback(_log_failure)
    return task


def _serves(group: str, loop) -> bool:
    """Whether a live panel of `group` is served on `loop`."""
    return loop in LOCAL.in_group(group)


async def _listen(layer, channel_name: str, loop) -> None:
    """`loop`'s fan-out listener: each event received on `channel_name` goes to the panels of
    the group it names (`GROUP_KEY`) served on this loop, in arrival order."""
    failures = 0
    while True:
        try:
            event = await layer.receive(channel_name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the layer comes back; panels resync meanwhile
            STATS["fanout_receive_failed"] += 1
            log.warning(
                "panel fan-out: the channel layer's receive failed (%s); retrying",
                type(exc).__name__,
            )
            await asyncio.sleep(min(5.0, 0.25 * 2**failures))
            failures += 1
            continue
        failures = 0
        group = event.pop(GROUP_KEY, None)
        members = LOCAL.in_group(group).get(loop) if isinstance(group, str) else None
        if not members:
            continue  # its panels left meanwhile
        try:
            await _send_local(layer, members, event)
        except Exception as exc:  # noqa: BLE001 - the next event must still be delivered
            STATS["push_failed"] += 1
            log.warning("panel push failed: %s", type(exc).__name__)


async def _heartbeat(loop) -> None:
    """Refresh this loop's presence rows every `heartbeat_interval()` s while it has panels."""
    while True:
        await asyncio.sleep(heartbeat_interval())
        names = LOCAL.on_loop(loop)
        if not names:
            FANOUT.stop_if_idle(loop)
            return
        try:
            await database_sync_to_async(refresh)(names)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a failed refresh is retried next beat
            log.warning("panel presence refresh failed", exc_info=True)
        layer = get_channel_layer()
        if fans_out(layer):
            try:
                await FANOUT.renew(layer, loop)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - retried next beat (the mark moved on)
                log.warning("panel group renewal failed: %s", type(exc).__name__)


# ---------------------------------------------------------------------------------------------
# Push
# ---------------------------------------------------------------------------------------------

#: Tasks of pushes scheduled on a running loop (kept referenced until done).
_pending: set = set()


def _log_failure(future) -> None:
    _pending.discard(future)
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        STATS["push_failed"] += 1
        log.warning("panel push failed: %s", type(exc).__name__)


async def _send_local(layer, members: list[tuple[str, Receiver | None]], event: dict) -> None:
    """Deliver `event` to `members` (channels of consumers on this loop, with their `Receiver`).

    A `panel.push` goes straight to each receiver that `takes_push_now()`, one after another
    in this one task: no channel-layer message, no wake-up of each consumer's receive task
    (channels' `await_many_dispatch`), one copy of the event for all of them. The others (a
    consumer still connecting, inside a handler, or holding its lock for a resync) and every
    other event get it through the layer, queued behind what they are doing, as before. A
    full channel drops it: counted in `STATS["push_dropped"]` and logged once per push; a
    receiver that fails is counted in `STATS["push_failed"]` and the others still get it."""
    channel_names = [name for name, _receiver in members]
    if event.get("type") == "panel.push":
        shared = deepcopy(event)  # receivers read it only; the caller's dict stays its own
        queued, failed = [], []
        for name, receiver in members:
            if receiver is None or not receiver.takes_push_now():
                queued.append(name)
                continue
            try:
                await receiver.push_now(shared)
            except Exception as exc:  # noqa: BLE001 - one panel must not cost the others
                failed.append(type(exc).__name__)
        if failed:
            STATS["push_failed"] += len(failed)
            log.warning(
                "panel push failed on %d panel(s) (%s); they resync",
                len(failed),
                ", ".join(sorted(set(failed))),
            )
        channel_names = queued
        if not channel_names:
            return
    send_shared = getattr(layer, "send_shared", None)
    if send_shared is not None:  # `plumbing.layers`: one copy of the event for all of them
        dropped = len(await send_shared(channel_names, event))
    else:  # channels' own in-memory layer: a copy per channel
        dropped = 0
        for channel_name in channel_names:
            try:
                await layer.send(channel_name, event)
            except ChannelFull:
                dropped += 1
    if dropped:
        STATS["push_dropped"] += dropped
        log.warning(
            "panel push dropped: %d channel(s) over capacity (%d); the panel resyncs",
            dropped,
            layer.capacity,
        )


def push(bot: Bot, open_id: str, message: dict[str, Any]) -> None:
    """Send `message` (a panel protocol dict, e.g. `asks.panel_message(ask)`) to every live
    panel of `open_id` of `bot`, in every process. Never raises and never blocks on a client.

    Call it after the state it announces is committed: `transaction.on_commit(lambda:
    presence.push(bot, open_id, message))`. Delivery is best effort (a group send may drop
    past a channel's capacity, a client may be reconnecting): panels resync with the database
    on connect and periodically, so a lost push only delays the panel.

    With the in-memory layer (one process) the message goes directly to this process's
    consumers of that user, on their event loop (thread-safe from any thread, e.g. the Feishu
    callback pool), and from there straight to each consumer's send path when it is idle
    (`_send_local`); a full channel is counted in `STATS["push_dropped"]` and logged. With
    Redis it is a `group_send` to `group_for(bot, open_id)` (over capacity, channels-redis
    logs "channels over capacity"), whose members are the fan-out channels of the processes
    serving that user's panels (`_Fanout`): one message per process, delivered there to its
    panels as above.

    The message is encoded to its JSON text here, once, and travels with the dict as the
    event's `"text"`: every panel sends that text rather than encoding the same dict again
    (`PanelConsumer.panel_push`; the dict still decides what each connection drops).
    """
    STATS["push"] += 1
    try:
        text = json.dumps(message, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # not JSON: nothing a panel could be sent
        STATS["push_failed"] += 1
        log.warning("panel push failed: %s", type(exc).__name__)
        return
    group_send(bot, open_id, {"type": "panel.push", "message": message, "text": text})


def group_send(bot: Bot, open_id: str, event: dict[str, Any]) -> None:
    """Deliver channel-layer `event` to the consumers of `group_for(bot, open_id)` (see
    `push`). Never raises."""
    try:
        layer = get_channel_layer()
        if layer is None or not open_id:
            return
        group = group_for(bot, open_id)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if isinstance(layer, InMemoryChannelLayer):
            # one hand-off per event loop (Daphne has one), not one per panel
            for loop, members in LOCAL.in_group(group).items():
                sending = _send_local(layer, members, event)
                try:
                    if loop is running:
                        task = loop.create_task(sending)
                    else:
                        task = asyncio.run_coroutine_threadsafe(sending, loop)
                except RuntimeError:  # that loop is closed: its consumers are gone
                    sending.close()
                    continue
                _pending.add(task)
                task.add_done_callback(_log_failure)
            return
        event = {**event, GROUP_KEY: group}  # for the receiving processes' `_listen`
        if running is not None:
            task = running.create_task(layer.group_send(group, event))
            _pending.add(task)
            task.add_done_callback(_log_failure)
            return
        async_to_sync(layer.group_send)(group, event)
    except Exception as exc:  # noqa: BLE001 - a push never fails the caller's change
        STATS["push_failed"] += 1
        log.warning("panel push failed: %s", type(exc).__name__)


def push_on_commit(bot: Bot, open_id: str, message: dict[str, Any]) -> None:
    """`push()` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: push(bot, open_id, message))
