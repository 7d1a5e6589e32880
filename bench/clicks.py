"""The feedback click the bench scripts send: one Feishu `card.action.trigger` payload.

`callback_load.py` and `faults.py` both press "conclusive / usable" on a delivery's card; the
payload follows Feishu's card callback shape (schema 2.0 header, `event.operator`,
`event.action.value`, `event.context`), as `tests/fixtures/` holds it.
"""

from __future__ import annotations

import time
import uuid


def feedback_click_payload(
    *,
    delivery_id: str,
    open_message_id: str,
    open_id: str,
    app_id: str,
    verification_token: str,
    open_chat_id: str,
    tenant_key: str = "bench_tenant",
) -> dict:
    """The decrypted `card.action.trigger` body of `open_id`'s "conclusive / usable" click on
    delivery `delivery_id` (its card is message `open_message_id` in `open_chat_id`), with a
    fresh `header.event_id` and `create_time` now (ms). Seal it with
    `interactions.lark.signing.seal` before sending."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": uuid.uuid4().hex,
            "token": verification_token,
            "create_time": str(int(time.time() * 1000)),
            "event_type": "card.action.trigger",
            "tenant_key": tenant_key,
            "app_id": app_id,
        },
        "event": {
            "operator": {"tenant_key": tenant_key, "open_id": open_id},
            "token": "c-bench",
            "action": {
                "tag": "button",
                "name": "fb_conclusive_usable",
                "value": {
                    "kind": "feedback",
                    "delivery": delivery_id,
                    "key": "conclusive_usable",
                    "rev": "",
                },
            },
            "host": "im_message",
            "context": {"open_message_id": open_message_id, "open_chat_id": open_chat_id},
        },
    }
