"""Dry-run gateway: logs each Feishu call Cardloop would make and returns synthetic ids, so the
demo and local development work offline (`CARDLOOP_LARK_DRY_RUN`, or a bot without an app
secret).

Log lines (logger `interactions.lark.dryrun`, INFO) name the call, the app_id, ids and sizes:

    lark dry run cli_demo: cardkit.card.create 1834 bytes -> card_id=dry_card_3f…
    lark dry run cli_demo: im.message.create to oc_… card_id=dry_card_3f… -> om_dry_…
    lark dry run cli_demo: cardkit.card.batch_update dry_card_3f… sequence=2 elements=fb_status,fb_buttons 912 bytes

Never logged: secrets, card text, a person's receive id (open_id / union_id / email).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Any

from interactions.lark.cardjson import describe_card
from interactions.lark.receivers import RECEIVE_ID_TYPES, loggable_receiver

log = logging.getLogger(__name__)


class DryRunGateway:
    """Implements `interactions.lark.client.Gateway` without network access."""

    dry_run = True

    def __init__(self, bot):
        self.app_id = bot.app_id

    def _log(self, call: str, detail: str) -> None:
        log.info("lark dry run %s: %s %s", self.app_id, call, detail)

    def create_card(self, card: dict[str, Any]) -> str:
        card_id = f"dry_card_{secrets.token_hex(6)}"
        self._log("cardkit.card.create", f"{describe_card(card)} -> card_id={card_id}")
        return card_id

    def send_card(
        self,
        *,
        receive_id: str,
        receive_id_type: str = "chat_id",
        card_id: str | None = None,
        card: dict[str, Any] | None = None,
        uuid: str | None = None,
    ) -> str:
        if (card_id is None) == (card is None):
            raise ValueError("pass exactly one of card_id and card")
        if receive_id_type not in RECEIVE_ID_TYPES:
            raise ValueError(f"receive_id_type must be one of {sorted(RECEIVE_ID_TYPES)}")
        if uuid:
            # Feishu answers a repeated `uuid` with the message it already sent (1 h); the
            # same id derived from it keeps resends in the demo on one message, as there
            digest = hashlib.sha256(f"{self.app_id}\n{uuid}".encode()).hexdigest()
            message_id = f"om_dry_{digest[:24]}"
        else:
            message_id = f"om_dry_{secrets.token_hex(12)}"
        what = f"card_id={card_id}" if card_id else f"raw card {describe_card(card)}"
        self._log(
            "im.message.create",
            f"to {loggable_receiver(receive_id, receive_id_type)} {what} -> {message_id}",
        )
        return message_id

    def update_element(
        self,
        card_id: str,
        element_id: str,
        element: dict[str, Any],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        self._log(
            "cardkit.card_element.update",
            f"{card_id} element={element_id} sequence={sequence} {describe_card(element)}",
        )

    def batch_update_elements(
        self,
        card_id: str,
        elements: dict[str, dict[str, Any]],
        *,
        sequence: int,
        uuid: str | None = None,
    ) -> None:
        self._log(
            "cardkit.card.batch_update",
            f"{card_id} sequence={sequence} elements={','.join(elements)} "
            f"{describe_card(elements)}",
        )

    def update_card(
        self, card_id: str, card: dict[str, Any], *, sequence: int, uuid: str | None = None
    ) -> None:
        self._log("cardkit.card.update", f"{card_id} sequence={sequence} {describe_card(card)}")

    def patch_message(self, open_message_id: str, card: dict[str, Any]) -> None:
        self._log("im.message.patch", f"{open_message_id} {describe_card(card)}")

    def get_message(self, open_message_id: str) -> dict[str, Any]:
        self._log("im.message.get", open_message_id)
        return {
            "message_id": open_message_id,
            "msg_type": "interactive",
            "chat_id": "",
            "content": "",
        }

    def reply_text(self, open_message_id: str, text: str, *, uuid: str | None = None) -> str:
        message_id = f"om_dry_{secrets.token_hex(12)}"
        self._log(
            "im.message.reply", f"to {open_message_id} text {len(text)} chars -> {message_id}"
        )
        return message_id
