"""Slack as a channel (in progress): per-app secrets and the Web API adapter (`webapi`).

Ingress, rendering and interaction kinds are not built yet, so `channel: "slack"` is still
refused by the channel registry (`interactions.channels`).
"""
