"""Channel layers of Cardloop (settings.CHANNEL_LAYERS).

`InMemoryChannelLayer` is channels' in-memory layer with one change: its expiry sweep runs at
most once a second instead of on every `receive()`. Channels' sweep walks every queued channel
and every group member, so with N consumers receiving one fan-out it costs O(N²) — about
0.4 s of CPU for one message to 1000 question panels on the reference machine
(`bench/panel_fanout.py`). Messages and group memberships still expire (`expiry`,
`group_expiry`), up to a second later.
"""

from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer as ChannelsInMemoryChannelLayer


class InMemoryChannelLayer(ChannelsInMemoryChannelLayer):
    """channels' in-memory layer (one process) with the expiry sweep rate-limited."""

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
