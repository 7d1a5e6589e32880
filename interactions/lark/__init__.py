"""The Feishu/Lark adapter, a leaf: it imports lark-oapi, httpx, Django and `plumbing`, and
nothing else of Cardloop (bots are duck-typed: `app_id`, `domain`, `secret()`).

| module | what |
|---|---|
| `client` | per-bot lark-oapi client behind `Gateway`; `LarkApiError`; `gateway_for(bot)` |
| `dryrun` | `DryRunGateway`: logs calls, returns synthetic ids |
| `receivers` | the `receive_id_type`s Feishu accepts and how a receiver is named in logs |
| `cardjson` | Card JSON 2.0 validator and pure helpers |
| `signing` | encrypt + sign payloads as Feishu does (`lark_replay`, tests) |

The Feishu *channel* built on it — the callback route, ingress, long connection and
`FeishuChannel` — is `interactions.channels.feishu`; the callback pipeline (dedupe, handlers,
the budget) is `interactions.callbacks`.

Importing `client` imports lark-oapi (several seconds); `cardjson`, `dryrun`, `receivers` and
`signing` do not.
"""
