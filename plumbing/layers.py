"""Channel layers of Cardloop (settings.CHANNEL_LAYERS).

`InMemoryChannelLayer` is channels' in-memory layer with two changes: its expiry sweep runs at
most once a second instead of on every `receive()`, and `send_shared` puts one message on many
channels with one copy instead of one per channel. Channels' sweep walks every queued channel
and every group member, so with N consumers receiving one fan-out it costs O(N²) — about
0.4 s of CPU for one message to 1000 question panels on the reference machine
(`bench/panel_fanout.py`). Messages and group memberships still expire (`expiry`,
`group_expiry`), up to a second later.
"""

from __future__ import annotations

import asyncio
import time
from copy import deepcopy

from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):
    """channels' in-memory layer (one process) with the expiry sweep rate-limited and a
    one-copy send to many channels (`send_shared`)."""

    #: Seconds between two expiry sweeps.
    sweep_interval = 1.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._last_sweep = 0.0

    def _clean_expired(self):
        now = time.monotonic()
        if now - self._last_sweep < self.sweep_interval:
            return
        self._last_sweep = now
        super()._clean_expired()

    async def send_shared(self, channels: list[str], message: dict) -> list[str]:
        """Put `message` on each of `channels` (this process's channels), as `send` does for
        one, but with one copy of it shared by all of them: `send` deep-copies the message for
        every channel, which for a push to 500 question panels of one user was the largest
        per-panel cost left in Daphne (bench/README.md "Panel fan-out"). Receivers must treat
        the message as read-only. Returns the channels that were full (the message was dropped
        there, as `send` raises `ChannelFull`); raises `TypeError` when `message` is not a
        dict and `TypeError` from channels for an invalid channel name."""
        if not isinstance(message, dict):
            raise TypeError("message is not a dict")
        if "__asgi_channel__" in message:
            raise TypeError("message must not carry __asgi_channel__")
        shared = (time.time() + self.expiry, deepcopy(message))
        full = []
        for channel in channels:
            queue = self.channels.get(channel)
            if queue is None:
                self.require_valid_channel_name(channel)
                queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
            try:
                queue.put_nowait(shared)
            except asyncio.QueueFull:
                full.append(channel)
        return full
