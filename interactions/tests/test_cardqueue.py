"""The CardKit card-update queue and its worker, against the Open API stub: coalescing,
strictly increasing sequences, backoff on 230020, pacing, ordering, held-until-answered,
stale recovery, an invalid answer card queued instead, and two workers on PostgreSQL."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from interactions.callbacks import registry
from interactions.cardqueue import service as cards
from interactions.cardqueue import worker as cardworker
from interactions.cardqueue.releases import RELEASES
from interactions.models import CardEntity, CardUpdate
from interactions.tests.test_cardjson import feedback_card
from plumbing.workqueue import WorkStatus, claim_due
from tests import feishu


def md(text: str) -> dict:
    return {"tag": "markdown", "content": text}


def _time_passes() -> None:
    """Make every pending update and every card's pacing due, as if the wait had elapsed."""
    past = timezone.now() - timedelta(seconds=1)
    CardUpdate.objects.filter(status=WorkStatus.PENDING).update(next_attempt_at=past)
    CardEntity.objects.update(next_send_at=past)


def _drain(limit: int = 10) -> int:
    total = 0
    while True:
        _time_passes()
        handled = cardworker.run_due(limit)
        total += handled
        if not handled:
            return total


def _element_calls(stub, card_id):
    return [
        c
        for c in stub.calls
        if c.path.startswith(f"/open-apis/cardkit/v1/cards/{card_id}")
        and c.method in ("PUT", "POST")
    ]


@pytest.fixture
def entity(db, lark_stub, lark_bot):
    return cards.send_card(
        lark_bot, feedback_card(), receive_id="oc_group_chat", purpose="feedback"
    )


# ---------------------------------------------------------------------------------------------
# Sending and registering
# ---------------------------------------------------------------------------------------------


def test_send_card_creates_an_entity_sends_a_message_referencing_it_and_records_both(
    entity, lark_stub
):
    assert entity.card_id in lark_stub.cards
    message = lark_stub.messages[entity.open_message_id]
    assert message["card_id"] == entity.card_id and message["receive_id"] == "oc_group_chat"
    assert (entity.sequence, entity.purpose) == (0, "feedback")


def test_invalid_card_is_refused_before_anything_is_sent(db, lark_stub, lark_bot):
    card = feedback_card()
    card["config"]["update_multi"] = False
    with pytest.raises(cards.InvalidCard) as info:
        cards.send_card(lark_bot, card, receive_id="oc_group_chat")
    assert any("update_multi" in p for p in info.value.problems)
    assert lark_stub.calls == []
    assert not CardEntity.objects.exists()


def test_register_card_is_idempotent_fills_in_ids_and_only_moves_the_sequence_forward(db, lark_bot):
    first = cards.register_card(lark_bot, card_id="7001", sequence=4)
    again = cards.register_card(lark_bot, card_id="7001", open_message_id="om_1", sequence=2)
    assert again.pk == first.pk
    again.refresh_from_db()
    assert (again.open_message_id, again.sequence, again.applied_sequence) == ("om_1", 4, 4)
    assert cards.register_card(lark_bot, open_message_id="om_1", sequence=9).sequence == 9
    with pytest.raises(ValueError):
        cards.register_card(lark_bot, card_id="7002", open_message_id="om_1")
    with pytest.raises(ValueError):
        cards.register_card(lark_bot)


# ---------------------------------------------------------------------------------------------
# Coalescing, sequences, ordering
# ---------------------------------------------------------------------------------------------


def test_element_updates_to_one_card_coalesce_into_one_request_latest_state_winning(
    entity, lark_stub
):
    cards.enqueue_elements(entity, {"fb_prompt": md("one")})
    cards.enqueue_elements(entity, {"fb_prompt": md("two"), "fb_form": md("form gone")})
    cards.enqueue_elements(entity, {"fb_prompt": md("three")})
    assert CardUpdate.objects.filter(status=WorkStatus.PENDING).count() == 1

    assert _drain() == 1
    (call,) = _element_calls(lark_stub, entity.card_id)
    assert call.path.endswith("/batch_update")
    applied = {
        a["params"]["element_id"]: a["params"]["element"] for a in call.field_json("actions")
    }
    assert applied == {"fb_prompt": md("three"), "fb_form": md("form gone")}
    body = lark_stub.cards[entity.card_id].card["body"]["elements"]
    assert body[0]["content"] == "three" and body[2]["content"] == "form gone"
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.DONE and row.elements == {} and row.card_json is None


def test_single_element_update_uses_the_element_endpoint(entity, lark_stub):
    cards.enqueue_elements(entity, {"fb_prompt": md("only")})
    _drain()
    (call,) = _element_calls(lark_stub, entity.card_id)
    assert call.path.endswith("/elements/fb_prompt") and call.method == "PUT"
    assert call.field_json("element") == md("only")


def test_sequences_are_strictly_increasing_per_card_across_updates_and_retries(entity, lark_stub):
    for round_ in range(3):
        cards.enqueue_elements(entity, {"fb_prompt": md(f"round {round_}")})
        if round_ == 1:
            lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230020)
        _drain()
    sequences = [c.body["sequence"] for c in _element_calls(lark_stub, entity.card_id)]
    assert sequences == sorted(set(sequences)) and len(sequences) == 4  # one retry
    assert lark_stub.cards[entity.card_id].sequences == [sequences[0], *sequences[2:]]
    entity.refresh_from_db()
    assert entity.sequence == sequences[-1] == entity.applied_sequence


def test_registered_card_continues_after_the_backends_last_sequence(db, lark_stub, lark_bot):
    card_id = lark_stub.add_card(feedback_card(), sequence=41)
    entity = cards.register_card(
        lark_bot, card_id=card_id, open_message_id="om_backend", sequence=41
    )
    cards.enqueue_elements(entity, {"fb_prompt": md("after backend")})
    _drain()
    assert lark_stub.cards[card_id].sequences == [42]


def test_rate_limit_from_the_stub_is_retried_with_backoff(entity, lark_stub):
    lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230020, times=2)
    cards.enqueue_elements(entity, {"fb_prompt": md("eventually")})
    before = timezone.now()
    assert cardworker.run_due() == 1
    row = CardUpdate.objects.get()
    assert (row.status, row.attempts, row.error_code) == (WorkStatus.PENDING, 1, 230020)
    assert row.next_attempt_at >= before + timedelta(seconds=1)
    assert "230020" in row.last_error and "log_id=stub-log-" in row.last_error
    entity.refresh_from_db()
    assert entity.next_send_at >= before + timedelta(seconds=1)  # the card backs off too
    assert cardworker.run_due() == 0  # not due yet

    _time_passes()
    cardworker.run_due()
    row.refresh_from_db()
    assert (row.attempts, row.status) == (2, WorkStatus.PENDING)
    first_delay = cardworker.backoff(1)
    assert row.next_attempt_at - timezone.now() > first_delay * 0.5  # grows: 2 s nominal
    _time_passes()
    cardworker.run_due()
    row.refresh_from_db()
    assert (row.status, row.attempts) == (WorkStatus.DONE, 3)
    assert lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"] == "eventually"


@pytest.mark.parametrize(
    ("header", "at_least", "at_most"),
    [("30", 30, 31), ("86400", 299, 301), ("soon", 1, 1.26)],
    ids=["honoured", "capped", "malformed-ignored"],
)
def test_retry_waits_at_least_the_servers_retry_after_capped_at_five_minutes(
    entity, lark_stub, header, at_least, at_most
):
    lark_stub.fail(
        "PUT", "/open-apis/cardkit/v1/cards/", code=230020, headers={"Retry-After": header}
    )
    cards.enqueue_elements(entity, {"fb_prompt": md("later")})
    before = timezone.now()
    cardworker.run_due()
    after = timezone.now()
    row = CardUpdate.objects.get()
    assert row.status == WorkStatus.PENDING and row.attempts == 1
    # The failure happened somewhere in [before, after]: bound each side by the matching end, so
    # a slow machine cannot make the assertion flaky.
    assert (row.next_attempt_at - before).total_seconds() >= at_least
    assert (row.next_attempt_at - after).total_seconds() <= at_most


def test_backoff_doubles_with_jitter_and_is_capped():
    for attempts, base in [(1, 1), (2, 2), (3, 4), (8, 120), (20, 120)]:
        delay = cardworker.backoff(attempts).total_seconds()
        assert base <= delay <= base * 1.25


def test_permanent_error_is_recorded_and_not_retried(entity, lark_stub, caplog):
    lark_stub.fail("PUT", "/open-apis/cardkit/v1/cards/", code=230099, msg="card content invalid")
    cards.enqueue_elements(entity, {"fb_prompt": md("x")})
    with caplog.at_level(logging.WARNING, logger="interactions.cardqueue.worker"):
        cardworker.run_due()
    row = CardUpdate.objects.get()
    assert (row.status, row.error_code, row.attempts) == (WorkStatus.FAILED, 230099, 1)
    assert "card content invalid" in row.last_error
    assert any("failed" in r.getMessage() for r in caplog.records)
    _time_passes()
    assert cardworker.run_due() == 0


def test_retryable_error_gives_up_as_dead_after_max_attempts(entity, lark_stub, settings):
    lark_stub.fail(
        "PUT", "/open-apis/cardkit/v1/cards/", code=230020, times=cardworker.MAX_ATTEMPTS
    )
    cards.enqueue_elements(entity, {"fb_prompt": md("never")})
    _drain()
    row = CardUpdate.objects.get()
    assert (row.status, row.attempts) == (WorkStatus.DEAD, cardworker.MAX_ATTEMPTS)


def test_updates_to_one_card_are_paced_five_per_second(entity, lark_stub):
    cards.enqueue_elements(entity, {"fb_prompt": md("first")})
    cardworker.run_due()
    entity.refresh_from_db()
    gap = entity.next_send_at - timezone.now()
    assert timedelta(0) < gap <= cardworker.MESSAGE_INTERVAL
    cards.enqueue_elements(entity, {"fb_prompt": md("second")})
    assert cardworker.run_due() == 0  # the card is not sendable again yet
    time.sleep(cardworker.MESSAGE_INTERVAL.total_seconds())
    assert cardworker.run_due() == 1


def test_update_enqueued_while_another_is_in_flight_waits_and_is_applied_after_it(
    entity, lark_stub
):
    cards.enqueue_elements(entity, {"fb_prompt": md("older")})
    token, (in_flight,) = claim_due(CardUpdate)
    newer = cards.enqueue_elements(entity, {"fb_prompt": md("newer")})
    assert newer.pk != in_flight.pk
    assert cardworker.run_due() == 0  # one in flight per card
    assert cardworker.apply_update(in_flight, token) == "done"
    _drain()
    contents = [
        c.field_json("element")["content"] for c in _element_calls(lark_stub, entity.card_id)
    ]
    assert contents == ["older", "newer"]
    assert lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"] == "newer"


def test_failed_in_flight_update_is_folded_under_a_newer_pending_one(entity, lark_stub):
    cards.enqueue_elements(entity, {"fb_prompt": md("older"), "fb_form": md("older form")})
    token, (in_flight,) = claim_due(CardUpdate)
    cards.enqueue_elements(entity, {"fb_prompt": md("newer")})
    lark_stub.fail("POST", "/open-apis/cardkit/v1/cards/", code=230020)
    assert cardworker.apply_update(in_flight, token) == "retry"
    in_flight.refresh_from_db()
    pending = CardUpdate.objects.get(status=WorkStatus.PENDING)
    assert in_flight.status == WorkStatus.DONE and in_flight.coalesced_into_id == pending.pk
    assert pending.elements == {"fb_prompt": md("newer"), "fb_form": md("older form")}
    _drain()
    elements = lark_stub.cards[entity.card_id].card["body"]["elements"]
    assert (elements[0]["content"], elements[2]["content"]) == ("newer", "older form")


def test_whole_card_update_uses_cardkit_for_an_entity_and_patch_for_a_plain_message(
    entity, lark_stub, lark_bot
):
    plain = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat", entity=False)
    for target in (entity, plain):
        new = feedback_card()
        new["body"]["elements"][0]["content"] = f"whole {target.pk}"
        cards.enqueue_card(target, new)
    _drain()
    (update,) = lark_stub.calls_to("PUT", f"/open-apis/cardkit/v1/cards/{entity.card_id}")
    assert update.body["sequence"] == 1
    assert (
        lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"]
        == f"whole {entity.pk}"
    )
    (patch,) = lark_stub.calls_to("PATCH", "/open-apis/im/v1/messages/")
    assert patch.path.endswith(plain.open_message_id)
    assert (
        lark_stub.messages[plain.open_message_id]["card"]["body"]["elements"][0]["content"]
        == f"whole {plain.pk}"
    )
    assert lark_stub.calls_to("PUT", "/open-apis/im/") == []


def test_element_updates_fold_into_a_pending_whole_card(entity, lark_stub):
    cards.enqueue_card(entity, feedback_card())
    cards.enqueue_elements(entity, {"fb_prompt": md("folded")})
    _drain()
    (call,) = _element_calls(lark_stub, entity.card_id)
    assert call.path == f"/open-apis/cardkit/v1/cards/{entity.card_id}"
    assert json.loads(call.body["card"]["data"])["body"]["elements"][0]["content"] == "folded"


def test_an_older_state_version_never_replaces_a_newer_one(entity, lark_stub):
    newer, older = feedback_card(), feedback_card()
    newer["body"]["elements"][0]["content"] = "v2"
    older["body"]["elements"][0]["content"] = "v1"
    assert cards.enqueue_card(entity, newer, version=2) is not None
    _drain()
    assert cards.enqueue_card(entity, older, version=1) is None  # late arrival dropped
    _drain()
    assert lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"] == "v2"
    assert len(_element_calls(lark_stub, entity.card_id)) == 1


def test_enqueue_joins_the_callers_transaction(entity):
    with pytest.raises(RuntimeError), transaction.atomic():
        cards.enqueue_elements(entity, {"fb_prompt": md("rolled back with the fact")})
        raise RuntimeError("the caller's write failed")
    assert not CardUpdate.objects.exists()


def test_element_updates_need_a_card_entity_and_valid_ids(db, lark_bot):
    plain = cards.register_card(lark_bot, open_message_id="om_plain")
    with pytest.raises(ValueError):
        cards.enqueue_elements(plain, {"fb_prompt": md("x")})
    entity = cards.register_card(lark_bot, card_id="7009")
    with pytest.raises(ValueError):
        cards.enqueue_elements(entity, {"9bad": md("x")})
    with pytest.raises(ValueError):
        cards.enqueue_elements(entity, {"fb_prompt": {"content": "no tag"}})


# ---------------------------------------------------------------------------------------------
# Recovery and stopping
# ---------------------------------------------------------------------------------------------


def test_stale_claim_is_recovered_and_folded_into_a_newer_pending_update(entity, lark_stub):
    cards.enqueue_elements(entity, {"fb_prompt": md("lost worker"), "fb_form": md("kept")})
    token, (stale,) = claim_due(CardUpdate)
    cards.enqueue_elements(entity, {"fb_prompt": md("newest")})
    CardUpdate.objects.filter(pk=stale.pk).update(claimed_at=timezone.now() - timedelta(minutes=5))
    assert cardworker.recover_stale_updates() == 1
    stale.refresh_from_db()
    assert stale.status == WorkStatus.DONE and stale.coalesced_into_id is not None
    assert stale.claim_token == ""
    _drain()
    elements = lark_stub.cards[entity.card_id].card["body"]["elements"]
    assert (elements[0]["content"], elements[2]["content"]) == ("newest", "kept")


def test_stale_claim_without_a_newer_update_goes_back_to_the_queue(entity, lark_stub):
    cards.enqueue_elements(entity, {"fb_prompt": md("retry me")})
    token, (stale,) = claim_due(CardUpdate)
    CardUpdate.objects.filter(pk=stale.pk).update(claimed_at=timezone.now() - timedelta(minutes=5))
    assert cardworker.recover_stale_updates() == 1
    stale.refresh_from_db()
    assert stale.status == WorkStatus.PENDING
    assert cardworker.apply_update(stale, token) == "done"  # the old claim is fenced off ...
    stale.refresh_from_db()
    assert stale.status == WorkStatus.PENDING  # ... and cannot settle the row
    _drain()
    assert CardUpdate.objects.get().status == WorkStatus.DONE


def test_stopping_worker_puts_unstarted_claims_back(db, lark_stub, lark_bot):
    entities = [
        cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat") for _ in range(3)
    ]
    for entity in entities:
        cards.enqueue_elements(entity, {"fb_prompt": md("x")})
    calls = iter([False, True, True])
    assert cardworker.run_due(10, should_stop=lambda: next(calls)) == 1
    statuses = sorted(CardUpdate.objects.values_list("status", "attempts"))
    assert statuses == [(WorkStatus.DONE, 1), (WorkStatus.PENDING, 0), (WorkStatus.PENDING, 0)]


def test_worker_in_dry_run_logs_the_update_and_marks_it_done(make_bot, caplog, lark_stub):
    bot = make_bot(app_id="cli_offline")
    entity = cards.send_card(bot, feedback_card(), receive_id="oc_group_chat")
    cards.enqueue_elements(entity, {"fb_prompt": md("offline")})
    with caplog.at_level(logging.INFO, logger="interactions.lark.dryrun"):
        _drain()
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert f"cardkit.card_element.update {entity.card_id} element=fb_prompt sequence=1" in text
    assert lark_stub.calls == []


@pytest.mark.django_db(transaction=True)  # WorkerLoop closes connections between ticks
def test_card_worker_command_once_applies_due_updates(entity, lark_stub):
    from django.core.management import call_command

    cards.enqueue_elements(entity, {"fb_prompt": md("from the command")})
    call_command("card_worker", "--once")
    assert CardUpdate.objects.get().status == WorkStatus.DONE
    assert (
        lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"] == "from the command"
    )


# ---------------------------------------------------------------------------------------------
# Answer first: held until the callback was answered; an invalid answer card is queued
# ---------------------------------------------------------------------------------------------


def test_updates_enqueued_by_a_handler_are_held_until_the_answer_was_sent(
    lark_callback, lark_stub, lark_bot, register_card_handler
):
    entity = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat")
    seen = {}

    def handler(action):
        cards.enqueue_elements(entity, {"fb_prompt": md("after the answer")})
        seen["applied_before_answer"] = cardworker.run_due()
        row = CardUpdate.objects.get()
        seen["held"] = (row.hold_token != "", row.next_attempt_at > timezone.now())
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert json.loads(response.content)["toast"]["type"] == "success"
    assert seen == {"applied_before_answer": 0, "held": (True, True)}
    assert _element_calls(lark_stub, entity.card_id) == []

    assert RELEASES.flush()  # the response was closed: released by the process's batch
    row = CardUpdate.objects.get()
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()
    assert cardworker.run_due() == 1
    (call,) = _element_calls(lark_stub, entity.card_id)
    assert call.body["sequence"] == 1


def test_a_click_that_enqueued_no_update_makes_no_release_statement_after_its_answer(
    lark_callback, lark_bot, register_card_handler
):
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    with CaptureQueriesContext(connection) as queries:
        response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert json.loads(response.content)["toast"]["type"] == "success"
    assert [q["sql"] for q in queries.captured_queries if "hold_token" in q["sql"]] == []


def test_releasing_a_hold_nothing_was_enqueued_under_touches_no_database(entity):
    hold = cards.Hold()
    with cards.holding(hold):
        pass
    with CaptureQueriesContext(connection) as queries:
        assert cards.release_holds(hold) == 0
    assert queries.captured_queries == []
    with cards.holding(hold):  # released all the same: later enqueues are not held
        row = cards.enqueue_elements(entity, {"fb_prompt": md("y")})
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()


def test_held_update_becomes_due_after_the_fallback_even_without_a_release(entity):
    hold = cards.Hold()
    with cards.holding(hold):
        row = cards.enqueue_elements(entity, {"fb_prompt": md("x")})
    wait = row.next_attempt_at - timezone.now()
    assert timedelta(seconds=2) < wait <= cards.HOLD_FALLBACK
    assert cardworker.run_due() == 0
    assert cards.release_holds(hold) == 1
    with cards.holding(hold):  # released: later enqueues are not held
        row = cards.enqueue_elements(entity, {"fb_prompt": md("y")})
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()


def test_after_a_budget_overrun_answer_the_handlers_late_updates_are_not_held(
    lark_callback, lark_stub, lark_bot, register_card_handler, settings
):
    settings.CARDLOOP_CALLBACK_BUDGET = 0.2
    entity = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat")
    done = threading.Event()

    def slow(action):
        time.sleep(0.8)
        cards.enqueue_elements(entity, {"fb_prompt": md("late")})
        done.set()

    register_card_handler("feedback", slow)
    response = lark_callback(feishu.payload("card_action_feedback_click"))
    assert json.loads(response.content)["toast"]["type"] == "info"
    assert done.wait(5)
    row = CardUpdate.objects.get()
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()


def test_valid_answer_card_is_returned_inline(lark_callback, register_card_handler):
    card = feedback_card()
    register_card_handler("feedback", lambda action: registry.Answer.success("Done", card=card))
    answer = json.loads(lark_callback(feishu.payload("card_action_feedback_click")).content)
    assert answer["card"] == {"type": "raw", "data": card}
    feishu.assert_valid_card(answer["card"]["data"])


def test_invalid_answer_card_is_answered_toast_only_and_patched_after_the_answer(
    lark_callback, lark_stub, lark_bot, register_card_handler
):
    message = cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat", entity=False)
    broken = feedback_card()
    button = broken["body"]["elements"][1]["columns"][0]["elements"][0]
    button["value"] = {"kind": "feedback"}  # a 1.0-style top-level value: the validator refuses it
    register_card_handler("feedback", lambda action: registry.Answer.success("Done", card=broken))
    body = feishu.payload(
        "card_action_feedback_click", {"event.context.open_message_id": message.open_message_id}
    )
    answer = json.loads(lark_callback(body).content)
    assert "card" not in answer and answer["toast"]["type"] == "success"
    assert RELEASES.flush()
    row = CardUpdate.objects.get()
    assert row.card_id == message.pk and row.hold_token == ""
    assert cardworker.run_due() == 1
    (patch,) = lark_stub.calls_to("PATCH", "/open-apis/im/v1/messages/")
    assert patch.field_json("content") == broken


# ---------------------------------------------------------------------------------------------
# Two workers on PostgreSQL
# ---------------------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_never_apply_one_update_twice(lark_stub, lark_bot):
    entities = [
        cards.send_card(lark_bot, feedback_card(), receive_id="oc_group_chat") for _ in range(12)
    ]
    rounds = 3
    errors = []

    def worker():
        try:
            idle = 0
            while idle < 20:
                handled = cardworker.run_due(4)
                idle = 0 if handled else idle + 1
                if not handled:
                    time.sleep(0.05)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    for round_ in range(rounds):
        for entity in entities:
            cards.enqueue_elements(entity, {"fb_prompt": md(f"round {round_}")})
        CardEntity.objects.update(next_send_at=timezone.now() - timedelta(seconds=1))
        threads = [threading.Thread(target=worker) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert errors == []
    assert CardUpdate.objects.exclude(status=WorkStatus.DONE).count() == 0
    for entity in entities:
        calls = _element_calls(lark_stub, entity.card_id)
        sequences = [c.body["sequence"] for c in calls]
        assert len(calls) == rounds, "each enqueued update applied exactly once"
        assert sequences == sorted(set(sequences))
        assert (
            lark_stub.cards[entity.card_id].card["body"]["elements"][0]["content"]
            == f"round {rounds - 1}"
        )


@pytest.mark.django_db(transaction=True)
def test_card_worker_process_applies_updates_and_stops_cleanly_on_sigterm(make_bot, tmp_path):
    """The real command in its own process (dry-run bot, so no network): it recovers a stale
    claim at start, applies due updates, and exits 0 on SIGTERM."""
    import signal
    import subprocess
    import sys

    from tests.processes import child_env

    bot = make_bot(app_id="cli_worker_proc")
    stale_card = cards.register_card(bot, card_id="dry_card_stale")
    cards.enqueue_elements(stale_card, {"fb_prompt": md("stale claim")})
    claim_due(CardUpdate)
    CardUpdate.objects.update(claimed_at=timezone.now() - timedelta(minutes=5))
    fresh_card = cards.register_card(bot, card_id="dry_card_fresh")
    cards.enqueue_elements(fresh_card, {"fb_prompt": md("fresh")})

    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "card_worker", "--idle-sleep", "0.1"],
            env=child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 90
            while CardUpdate.objects.filter(status=WorkStatus.DONE).count() < 2:
                assert process.poll() is None, log_path.read_text()[-2000:]
                assert time.monotonic() < deadline, log_path.read_text()[-2000:]
                time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
        finally:
            if process.poll() is None:
                process.kill()
    output = log_path.read_text()
    assert "recovered 1 stale card update" in output
    assert "element=fb_prompt sequence=1" in output
    assert "card_worker: started" in output and output.rstrip().endswith("card_worker: stopped")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_held_updates_are_released_once_the_asgi_response_was_sent(
    lark_stub, lark_bot, register_card_handler
):
    from asgiref.sync import sync_to_async

    entity = await sync_to_async(cards.send_card)(
        lark_bot, feedback_card(), receive_id="oc_group_chat"
    )

    def handler(action):
        cards.enqueue_elements(entity, {"fb_prompt": md("via asgi")})
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    status, _, answer = await feishu.apost_callback(
        lark_bot.app_id, feishu.payload("card_action_feedback_click")
    )
    assert status == 200 and answer["toast"]["type"] == "success"
    assert await sync_to_async(RELEASES.flush, thread_sensitive=False)()
    row = await CardUpdate.objects.aget()
    await sync_to_async(connections.close_all)()  # the async ORM's thread keeps its session
    assert row.hold_token == "" and row.next_attempt_at <= timezone.now()


def test_a_repeated_stop_signal_is_logged_once(caplog):
    # Under `serve` a worker gets SIGTERM twice: from its process group and from serve.
    import os
    import signal

    from plumbing.workqueue import WorkerLoop

    loop = WorkerLoop(lambda: 0, name="test_worker")
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        loop.install_signal_handlers()
        with caplog.at_level("INFO", logger="plumbing.workqueue"):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
    assert loop.stop_event.is_set()
    assert [r.getMessage() for r in caplog.records] == [
        "test_worker: signal 15 received, finishing the current batch"
    ]


@pytest.mark.django_db(transaction=True)  # the release thread has a connection of its own
def test_holds_released_together_become_due_in_one_statement_and_never_later(entity, monkeypatch):
    """Clicks answered while a release batch is being written share the next one; a release
    never moves an update's due time later."""
    from interactions.cardqueue import releases

    holds = [cards.Hold() for _ in range(3)]
    for hold, name in zip(holds, ("a", "b", "c"), strict=True):
        other = CardEntity.objects.create(
            bot=entity.bot, card_id=f"card_{name}", purpose=entity.purpose
        )
        with cards.holding(hold):
            cards.enqueue_elements(other, {"fb_prompt": md(name)})
    early = timezone.now() - timedelta(seconds=30)
    CardUpdate.objects.filter(card__card_id="card_a").update(next_attempt_at=early)
    statements = []
    real = releases.release_tokens
    monkeypatch.setattr(releases, "release_tokens", lambda t: statements.append(t) or real(t))
    queue = releases.Releases()
    with queue._cond:  # the three answers are sent before the thread takes its first batch
        for hold in holds:
            hold.released = True
            queue._tokens.append(hold.token)
    queue.add(cards.Hold().token)  # a click whose row is gone: harmless
    assert queue.flush()
    assert len(statements) == 1 and len(statements[0]) == 4
    assert not CardUpdate.objects.exclude(hold_token="").exists()
    assert CardUpdate.objects.get(card__card_id="card_a").next_attempt_at == early
    assert cardworker.run_due(10) == 3


def test_a_clicks_first_update_of_a_card_is_one_statement_and_later_ones_merge_into_it(
    entity, lark_stub
):
    hold, bot = cards.Hold(), entity.bot
    with cards.holding(hold), CaptureQueriesContext(connection) as first:
        one = cards.enqueue_elements_for_card_id(
            bot, entity.card_id, {"fb_prompt": md("first"), "fb_a": md("a")}
        )
    assert len(first.captured_queries) == 1
    assert one.card_id == entity.pk and one.hold_token == hold.token
    assert one.next_attempt_at > timezone.now()  # held until the answer was sent
    two = cards.enqueue_elements_for_card_id(bot, entity.card_id, {"fb_prompt": md("2nd")})
    assert two.pk == one.pk
    row = CardUpdate.objects.get(status=WorkStatus.PENDING)
    assert row.elements == {"fb_prompt": md("2nd"), "fb_a": md("a")}
    assert row.hold_token == hold.token  # the merge kept the click's hold
    assert cards.enqueue_elements_for_card_id(bot, "no_such_card", {"x": md("x")}) is None


def test_the_release_thread_keeps_its_connection_while_batches_wait_and_finishes_it_when_idle(
    monkeypatch,
):
    """Under load the next batch is already queued when one is written: the thread writes it
    on the same connection; once nothing waits (or a batch failed) its connections are
    finished (PostgreSQL: back to the pool) before `flush` returns."""
    from interactions.cardqueue import releases

    events = []
    first_written = threading.Event()
    go_on = threading.Event()

    def release(tokens):
        events.append(("write", tuple(tokens)))
        if tokens == ["a"]:
            first_written.set()
            go_on.wait(5)
        if tokens == ["c"]:
            raise RuntimeError("database gone")
        return 0

    monkeypatch.setattr(releases, "release_tokens", release)
    monkeypatch.setattr(releases.threads, "finish_connections", lambda: events.append("finish"))
    queue = releases.Releases()
    queue.add("a")
    assert first_written.wait(5)
    queue.add("b")  # waits while "a" is written
    go_on.set()
    assert queue.flush()
    assert events == [("write", ("a",)), ("write", ("b",)), "finish"]
    queue.add("c")  # fails: finished at once
    assert queue.flush()
    assert events[3:] == [("write", ("c",)), "finish"]
