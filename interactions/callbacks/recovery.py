"""Recovery of acknowledged clicks whose handler never finished: a card-action claim still
`processing` after its lease ran out (its web process was killed, or its handler gave up on
a transient database error while the database was gone) is run again from the verified action
stored with it, until its answer is recorded (`interactions.callbacks.dispatcher.run_claim`).

`recover_expired_claims` is one pass; `card_worker` runs it every `--period` seconds (10), so
with the default lease (`CARDLOOP_CLICK_LEASE`, 15 s) an orphaned click is recorded within
about 25 s even when nobody clicks again. An identical retry of the click takes the claim over
by itself as soon as the lease ran out (`inbound.claim_card_action`).
"""

from __future__ import annotations

import logging

from interactions.callbacks import dispatcher, inbound, registry
from interactions.cardqueue import service as cards

log = logging.getLogger(__name__)


def recover_expired_claims(limit: int = 50) -> int:
    """Take over and run at most `limit` card-action claims whose lease ran out (oldest
    first); each is taken with one conditional UPDATE, so several workers never run the same
    claim at once. The card updates its handler enqueues are released right after (no answer
    goes to Feishu). Returns how many claims were recorded. Database errors propagate (the
    worker loop logs them and tries again next period)."""
    recorded = 0
    for pk in inbound.expired_claim_ids(limit):
        row = inbound.take_over(pk)
        if row is None:
            continue  # answered meanwhile, or another worker / a retry took it
        try:
            action = registry.CardAction.from_stored(row.bot, row.action)
        except registry.InvalidCallback:
            log.error("claim %s: its stored action is unreadable; answered as refused", pk)
            inbound.finish_claim(pk, {})
            continue
        hold = cards.Hold()
        with cards.holding(hold):
            answer = dispatcher.run_claim(row.bot, row.pk, action)
        cards.release_holds(hold)
        if answer != dispatcher.still_working():
            recorded += 1
            log.info(
                "recovered card action %s of %s (run %d)",
                row.event_id,
                row.bot.app_id,
                row.attempts,
            )
    return recorded
