"""The Feishu channel: `channel` (`FeishuChannel`, the channel interface), `asgi` (the
`/lark/<app_id>/callback` ASGI route), `ingress` (verifying HTTP callbacks), `ws` (the long
connection). The Open API adapter itself is the leaf `interactions.lark`."""
