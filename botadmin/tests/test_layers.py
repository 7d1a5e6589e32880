"""plumbing.layers.InMemoryChannelLayer: channels' in-memory layer with a rate-limited sweep."""

from __future__ import annotations

import time

from django.conf import settings

from plumbing.layers import InMemoryChannelLayer


async def test_expired_messages_are_still_swept_but_at_most_once_a_second():
    layer = InMemoryChannelLayer(expiry=-1)  # every message is expired as soon as it is sent
    await layer.send("panel.a", {"type": "x"})
    await layer.group_add("g", "panel.a")
    layer._last_sweep = time.monotonic()  # swept just now: the next sweep waits
    layer._clean_expired()
    assert "panel.a" in layer.channels
    layer._last_sweep -= layer.sweep_interval  # a second later
    layer._clean_expired()
    assert "panel.a" not in layer.channels and not layer.groups.get("g")


async def test_messages_flow_as_with_channels_layer():
    layer = InMemoryChannelLayer(capacity=2)
    name = await layer.new_channel()
    await layer.group_add("g", name)
    await layer.group_send("g", {"type": "panel.push", "n": 1})
    assert (await layer.receive(name))["n"] == 1


def test_settings_use_it_without_redis():
    backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
    assert backend in (
        "plumbing.layers.InMemoryChannelLayer",
        "channels_redis.core.RedisChannelLayer",
    )
    if not settings.REDIS_URL:
        assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"] == settings.CHANNEL_CAPACITY
