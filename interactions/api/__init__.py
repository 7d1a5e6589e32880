"""The bot API of interactions (DRF views, one module per resource; serializers in
`interactions.api.serializers`; every view derives from `interactions.api.base`).

| module | routes |
|---|---|
| `interactions` | `/api/v1/interactions…`, `/api/v1/approvals/check` |
| `textcommands` | `/api/v1/interactions/text-command` |
| `capabilities` | `/api/v1/capabilities` |
| `asks` | `/api/v1/sessions/<id>/progress`, `/api/v1/sessions/<id>/asks…`, `/api/v1/asks/<id>…` |
"""
