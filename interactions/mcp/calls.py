"""Waiting MCP tool calls (`McpCall`): remember, forget, and cancel one by its JSON-RPC id —
every state change of the table.

A blocking call is remembered (token, JSON-RPC request id → the interaction it waits on) for
as long as it waits. A client on the initialize-handshake protocol cancels a call by POSTing
`notifications/cancelled {requestId}`; with several server processes that POST may reach a
process other than the one holding the call, so `cancel` finds the call's question here and
withdraws it exactly as the cancel API does; the waiting call sees it at its next wake-up.
"""

from __future__ import annotations

import logging

from interactions.asks import service as asks
from interactions.lifecycle import resolve as lifecycle
from interactions.models import Interaction, McpCall, McpToken

log = logging.getLogger(__name__)

#: Longest JSON-RPC request id kept (the column).
REQUEST_ID_MAX = McpCall._meta.get_field("rpc_request_id").max_length


def remember(token: McpToken, rpc_request_id: str, interaction: Interaction) -> int | None:
    """Record that call `rpc_request_id` of `token` waits on `interaction`; returns the row's
    pk (None for a call without an id, which cannot be cancelled by id anyway)."""
    if not rpc_request_id:
        return None
    return McpCall.objects.create(
        token=token, rpc_request_id=rpc_request_id[:REQUEST_ID_MAX], interaction_id=interaction.pk
    ).pk


def forget(call_pk: int | None) -> None:
    """The call ended (answered, timed out, cancelled): drop its row."""
    if call_pk is not None:
        McpCall.objects.filter(pk=call_pk).delete()


def cancel(token: McpToken, rpc_request_id: str) -> bool:
    """A `notifications/cancelled` for `rpc_request_id` of `token` (any process): withdraw
    the question that call waits on (`asks.cancel_ask` / `lifecycle.cancel`). Only the token's
    own calls are found. Returns True when this cancelled it."""
    call = (
        McpCall.objects.select_related("interaction")
        .filter(token=token, rpc_request_id=str(rpc_request_id)[:REQUEST_ID_MAX])
        .order_by("-id")
        .first()
    )
    if call is None or call.interaction.is_final:
        return False
    ia = call.interaction
    outcome = asks.cancel_ask(ia) if ia.kind == Interaction.Kind.ASK else lifecycle.cancel(ia)
    if outcome.won:
        log.info("mcp: %s withdrawn by notifications/cancelled", ia.public_id)
    return outcome.won
