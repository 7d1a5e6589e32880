"""Telegram as a channel (in progress): per-bot secrets and admin (`admin`), and the Bot API
adapter (`botapi`, a leaf on httpx).

Rendering, the webhook ingress and the channel registration come next; until they land,
`channel: "telegram"` is refused by the channel registry (`interactions.channels`).
"""
