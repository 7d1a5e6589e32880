"""Who a Feishu message goes to: the `receive_id_type` values Feishu accepts, and how a
receiver is named in logs. Shared by the real gateway (`client`) and the dry run (`dryrun`)."""

from __future__ import annotations

#: `receive_id_type` values Feishu accepts for sending a message.
RECEIVE_ID_TYPES = frozenset({"chat_id", "open_id", "union_id", "user_id", "email"})


def loggable_receiver(receive_id: str, receive_id_type: str) -> str:
    """A chat_id is logged; a person's id (open_id, union_id, user_id, email) is not."""
    return receive_id if receive_id_type == "chat_id" else f"<{receive_id_type}>"
