"""The Feishu/Lark adapter: one module per concern.

| module | what |
|---|---|
| `client` | per-bot lark-oapi client behind `Gateway`; `LarkApiError`; `gateway_for(bot)` |
| `dryrun` | `DryRunGateway`: logs calls, returns synthetic ids |
| `ingress` | `POST /lark/<app_id>/callback` through lark-oapi's `EventDispatcherHandler` |
| `dispatcher` | verified payload → dedupe → registry handler → answer (HTTP and long connection) |
| `ws` | long connection (`lark.ws.Client`) into the same dispatcher (`manage.py lark_connect`) |
| `cardjson` | Card JSON 2.0 validator and pure helpers |
| `signing` | encrypt + sign payloads as Feishu does (`lark_replay`, tests) |

Importing `client`, `ingress` or `ws` imports lark-oapi (several seconds); `cardjson` and
`signing` do not.
"""
