"""The Feishu card-action handler of interactions (registry kind `interaction`): button clicks
and form submits on approval, quick-reply and form cards. Registered in
`InteractionsConfig.ready()`."""

from __future__ import annotations

from interactions.approvals.service import answer, find, lost_message, success_message
from interactions.callbacks.registry import Answer
from interactions.lifecycle.resolve import Refused
from interactions.models import Interaction
from interactions.render import interaction_cards

V = Interaction.Via


def on_card_action(action):
    """Registry handler of `{"kind": "interaction", "interaction_id", "action_id",
    "action_value"}` clicks and form submits (`interactions.callbacks.registry.CardAction`).

    The operator comes from the verified callback and must be allowed; the click's chat must
    be the interaction's. Unknown / expired / already-handled ids and unknown actions get a
    toast and no write (an already-handled one also gets its final card back). A winning
    click answers a success toast plus the final card (Cardloop owns the whole card); the
    queued update (held until this answer was sent) covers the other viewers.
    """
    value = action.value
    ia = find(action.bot, str(value.get("interaction_id") or ""))
    choice = str(value.get("action_value") or value.get("action_id") or "")
    try:
        outcome = answer(
            ia,
            choice=choice,
            via=V.CARD,
            operator=action.operator_open_id,
            chat_id=action.open_chat_id or None,
            form=action.form_value if ia is not None and ia.kind == Interaction.Kind.FORM else None,
            form_prefixed=True,
        )
    except Refused as refused:
        final = (
            refused.interaction if refused.interaction and refused.interaction.is_final else None
        )
        card = interaction_cards.feishu_card(final) if final is not None else None
        kind = "info" if refused.code in ("already_final", "expired") else "warning"
        return getattr(Answer, kind)(refused.message, card=card)
    if not outcome.won:
        return Answer.info(
            lost_message(outcome.interaction),
            card=interaction_cards.feishu_card(outcome.interaction),
        )
    return Answer.success(
        success_message(outcome), card=interaction_cards.feishu_card(outcome.interaction)
    )
