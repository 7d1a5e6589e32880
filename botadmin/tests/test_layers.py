"""plumbing.layers.InMemoryChannelLayer: channels' in-memory layer with a rate-limited sweep."""

from __future__ import annotations

import time

import pytest
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


async def test_send_shared_reaches_every_channel_and_reports_the_full_ones():
    layer = InMemoryChannelLayer(capacity=1)
    a, b, c = [await layer.new_channel() for _ in range(3)]
    await layer.send(b, {"type": "first"})  # b is full now
    message = {"type": "panel.push", "message": {"requestId": "r1"}}
    assert await layer.send_shared([a, b, c], message) == [b]
    message["message"]["requestId"] = "changed by the sender"  # receivers hold a copy
    got_a, got_c = await layer.receive(a), await layer.receive(c)
    assert got_a["message"]["requestId"] == got_c["message"]["requestId"] == "r1"
    assert (await layer.receive(b))["type"] == "first"


async def test_send_shared_refuses_what_send_refuses():
    layer = InMemoryChannelLayer()
    with pytest.raises(TypeError):
        await layer.send_shared(["panel.a"], ["not", "a", "dict"])
    with pytest.raises(TypeError):
        await layer.send_shared(["not a valid name!"], {"type": "x"})
