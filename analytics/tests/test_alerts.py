"""Alert rules on synthetic histories: fire once per breach, no re-fire while breached,
resolve past the clear margin, no flapping at the threshold, muting, the Feishu card (valid,
sent through the dry run and the stub, updated on resolve), events, the worker."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command, get_commands
from django.db import connections, transaction
from django.utils import timezone

from analytics.alerts import cards, rules, service
from analytics.models import Alert, AlertRule, ReviewItem
from botadmin.models import AuditEntry
from cardloop.management.commands.serve import WORKER_COMMANDS
from feedback.events import emit
from feedback.models import Delivery, Event, OutboxItem, WebhookDestination
from interactions.lark.cardjson import validate_card
from interactions.models import CardEntity, CardUpdate
from plumbing.workqueue import WorkStatus

T0 = datetime(2025, 3, 10, 4, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.fixture
def ratings_at(make_delivery, rate):
    """`ratings_at(when, positive=0, negative=0, team="a")`: that many rated deliveries sent
    at `when` (one rating each)."""
    counter = iter(range(1_000_000))

    def make(when, positive=0, negative=0, team="a"):
        for verdict, n in (("conclusive_usable", positive), ("wrong", negative)):
            for _ in range(n):
                rate(make_delivery(at=when, team=team), f"ou_{next(counter)}", verdict)

    return make


@pytest.fixture
def rate_rule(world):
    """A positive-rate rule of team A: below 50 % over an hour, ≥ 4 ratings, clear at 60 %."""
    return AlertRule.objects.create(
        name="positive rate A",
        team=world.team_a,
        kind=AlertRule.Kind.POSITIVE_RATE_BELOW,
        threshold=50,
        window_minutes=60,
        min_ratings=4,
        clear_margin=10,
    )


def _reading(value, enough=True):
    return rules.Reading(value, 10, enough, T0, T0)


@pytest.mark.parametrize(
    ("kind", "firing", "value", "expected"),
    [
        ("positive_rate_below", False, 49.9, rules.FIRE),
        ("positive_rate_below", False, 50.0, None),
        ("positive_rate_below", True, 55.0, None),  # inside the hysteresis band
        ("positive_rate_below", True, 60.0, rules.RESOLVE),
        ("negatives_above", False, 21, rules.FIRE),
        ("negatives_above", True, 18, None),
        ("negatives_above", True, 15, rules.RESOLVE),
        ("failure_rate_above", False, 5.1, rules.FIRE),
        ("failure_rate_above", True, 0.0, rules.RESOLVE),
        ("negatives_growth", False, 3.5, rules.FIRE),
        ("dead_items_above", False, 0, None),
    ],
)
def test_decide_fires_on_a_breach_and_resolves_only_past_the_clear_margin(
    kind, firing, value, expected
):
    threshold = {
        "positive_rate_below": 50,
        "negatives_above": 20,
        "failure_rate_above": 5,
        "negatives_growth": 3,
        "dead_items_above": 0,
    }[kind]
    margin = {
        "positive_rate_below": 10,
        "negatives_above": 5,
        "failure_rate_above": 2,
        "negatives_growth": 1,
        "dead_items_above": 0,
    }[kind]
    assert rules.decide(kind, threshold, margin, _reading(value), firing=firing) == expected


def test_not_enough_data_neither_fires_nor_resolves():
    for firing in (False, True):
        assert (
            rules.decide("positive_rate_below", 50, 10, _reading(0.0, enough=False), firing=firing)
            is None
        )
        assert rules.decide("positive_rate_below", 50, 10, _reading(None), firing=firing) is None


def test_a_breach_fires_once_stays_open_while_breached_and_resolves_when_clear(
    world, rate_rule, ratings_at
):
    ratings_at(T0 - 30 * timedelta(minutes=1), positive=4)
    assert service.evaluate_rule(rate_rule.pk, now=T0) is None
    ratings_at(T0 + 30 * timedelta(minutes=1), positive=1, negative=3)  # 25 %
    assert service.evaluate_rule(rate_rule.pk, now=T0 + HOUR) == rules.FIRE
    assert service.evaluate_rule(rate_rule.pk, now=T0 + HOUR + timedelta(minutes=5)) is None
    assert Alert.objects.count() == 1
    alert = Alert.objects.get()
    assert (alert.value, alert.threshold, alert.sample) == (25.0, 50, 4)
    assert alert.window_start == T0 and alert.window_end == T0 + HOUR
    ratings_at(T0 + HOUR + 30 * timedelta(minutes=1), positive=4)  # 100 %
    assert service.evaluate_rule(rate_rule.pk, now=T0 + 2 * HOUR) == rules.RESOLVE
    alert.refresh_from_db()
    assert alert.resolved_at == T0 + 2 * HOUR and alert.resolved_value == 100.0
    types = list(Event.objects.order_by("id").values_list("type", flat=True))
    assert types == ["alert.fired", "alert.resolved"]
    data = json.loads(Event.objects.get(type="alert.fired").body)["data"]
    assert data["value"] == 25.0 and data["threshold"] == 50 and data["window_minutes"] == 60
    assert data["team_id"] == world.team_a.id
    assert f"team={world.team_a.id}" in data["dashboard_url"]
    # the next breach is a new alert
    ratings_at(T0 + 2 * HOUR + 30 * timedelta(minutes=1), negative=4)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + 3 * HOUR) == rules.FIRE
    assert Alert.objects.count() == 2


def test_a_figure_wobbling_around_the_threshold_does_not_flap(world, rate_rule, ratings_at):
    # per hour: 40 %, 55 %, 45 %, 55 %, 48 % — under 50 once, never back to 60
    mixes = [(2, 3), (11, 9), (9, 11), (11, 9), (12, 13)]
    actions = []
    for hour, (pos, neg) in enumerate(mixes):
        ratings_at(T0 + hour * HOUR + timedelta(minutes=10), positive=pos, negative=neg)
        actions.append(service.evaluate_rule(rate_rule.pk, now=T0 + (hour + 1) * HOUR))
    assert actions == [rules.FIRE, None, None, None, None]
    assert Alert.objects.count() == 1 and Alert.objects.get().is_open
    assert Event.objects.filter(type="alert.resolved").count() == 0


def test_a_muted_rule_fires_nothing_until_the_mute_ends(world, rate_rule, ratings_at, superuser):
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    service.mute_rule(rate_rule, until=T0 + HOUR + timedelta(minutes=30), actor=superuser)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + HOUR) is None
    ratings_at(T0 + HOUR + timedelta(minutes=40), negative=5)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + 2 * HOUR) == rules.FIRE
    assert AuditEntry.objects.filter(
        action="alert_rule.muted", target_id=str(rate_rule.pk)
    ).exists()


def test_negative_count_growth_failure_rate_and_dead_items_are_measured(
    world, ratings_at, make_delivery
):
    ratings_at(T0 - HOUR + timedelta(minutes=5), negative=2)
    ratings_at(T0 + timedelta(minutes=5), negative=7, positive=1)
    for _ in range(3):
        make_delivery(at=T0 + timedelta(minutes=6), team="a", status=Delivery.Status.SEND_FAILED)
    common = {"team": world.team_a, "window_minutes": 60, "min_ratings": 1}
    count = AlertRule.objects.create(name="n", kind="negatives_above", threshold=5, **common)
    growth = AlertRule.objects.create(name="g", kind="negatives_growth", threshold=3, **common)
    failures = AlertRule.objects.create(name="f", kind="failure_rate_above", threshold=10, **common)
    now = T0 + HOUR
    assert rules.measure(count, now).value == 7
    assert rules.measure(growth, now).value == 3.5  # 7 against 2 in the hour before
    assert rules.measure(failures, now).value == pytest.approx(100 * 3 / 11)
    for rule in (count, growth, failures):
        assert service.evaluate_rule(rule.pk, now=now) == rules.FIRE


def test_dead_outbox_items_and_card_updates_count_for_a_bot_rule(world, make_delivery):

    hook = WebhookDestination.objects.create(
        name="h", url="https://hooks.example.com/x", event_types=["turn.completed"]
    )
    delivery = make_delivery(team="a", at=T0, webhook_destination_ids=[hook.pk])
    with transaction.atomic():
        emit(
            "turn.completed",
            "evt_dead_1",
            {},
            bot=world.bot,
            team=world.team_a,
            delivery=delivery,
            destination_ids=[hook.pk],
        )
    OutboxItem.objects.update(status=WorkStatus.DEAD)
    entity = CardEntity.objects.create(
        bot=world.bot, card_id="card_dead", open_message_id="om_dead"
    )
    CardUpdate.objects.create(card=entity, card_json={}, status=WorkStatus.DEAD)
    rule = AlertRule.objects.create(
        name="dead", bot=world.bot, kind="dead_items_above", threshold=1, window_minutes=60
    )
    assert rules.measure(rule, timezone.now() + timedelta(minutes=1)).value == 2
    team_rule = AlertRule.objects.create(
        name="dead team", team=world.team_a, kind="dead_items_above", threshold=1, window_minutes=60
    )
    assert (
        rules.measure(team_rule, timezone.now() + timedelta(minutes=1)).value == 1
    )  # no team on cards


def test_the_alert_card_is_valid_and_names_figure_threshold_window_and_link():
    facts = {
        "rule": "Positive rate",
        "kind": "positive_rate_below",
        "kind_label": "positive rate below X %",
        "scope": "Team A",
        "value": 31.25,
        "threshold": 50.0,
        "window_minutes": 60,
        "sample": 32,
        "fired_at": T0,
        "resolved_at": None,
        "resolved_value": None,
        "link": cards.dashboard_link(
            "https://cardloop.example.com",
            start=T0 - HOUR,
            end=T0,
            team_id=3,
            bot_app_id=None,
            kind="positive_rate_below",
        ),
    }
    card = cards.alert_card(facts)
    assert validate_card(card) == []
    text = json.dumps(card, ensure_ascii=False)
    assert "31.2%" in text and "50.0%" in text and "60" in text and "Team A" in text
    assert card["body"]["elements"][-1]["behaviors"][0]["default_url"] == (
        "https://cardloop.example.com/dashboard/?from=2025-03-10T03%3A00%3A00.000Z"
        "&to=2025-03-10T04%3A00%3A00.000Z&tz=UTC&team=3"
    )
    resolved = cards.alert_card(facts | {"resolved_at": T0 + HOUR, "resolved_value": 72.0})
    assert validate_card(resolved) == [] and "72.0%" in json.dumps(resolved)
    assert resolved["header"]["template"] == "green"


def test_a_fired_alert_card_goes_through_the_dry_run_and_resolving_queues_its_update(
    world, rate_rule, ratings_at
):
    rate_rule.notify_bot, rate_rule.notify_chat = world.bot, world.chat_a  # no secret: dry run
    rate_rule.save()
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + HOUR) == rules.FIRE
    alert = Alert.objects.get()
    assert alert.notice == Alert.Notice.SENT and alert.card_id and alert.open_message_id
    ratings_at(T0 + HOUR + timedelta(minutes=10), positive=5)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + 2 * HOUR) == rules.RESOLVE
    update = CardUpdate.objects.get(card__card_id=alert.card_id)
    assert update.card_json["header"]["template"] == "green"
    assert validate_card(update.card_json) == []


def test_a_fired_alert_card_reaches_the_feishu_stub(
    world, lark_stub, lark_bot, ratings_at, settings
):
    settings.LANGUAGE_CODE = "en"
    rule = AlertRule.objects.create(
        name="stubbed",
        team=world.team_a,
        kind="negatives_above",
        threshold=2,
        window_minutes=60,
        clear_margin=1,
        notify_bot=lark_bot,
        notify_chat=world.chat_a,
    )
    ratings_at(T0 + timedelta(minutes=10), negative=3)
    assert service.evaluate_rule(rule.pk, now=T0 + HOUR) == rules.FIRE
    alert = Alert.objects.get()
    assert alert.notice == Alert.Notice.SENT
    card = lark_stub.cards[alert.card_id].card
    assert validate_card(card) == []
    assert "Alert: stubbed" in json.dumps(card) and "semantic=negative" in json.dumps(card)


def test_a_card_that_cannot_be_sent_is_recorded_and_the_alert_stays(
    world, rate_rule, ratings_at, lark_stub, lark_bot
):
    lark_stub.fail("POST", "/open-apis/cardkit/v1/cards", code=99991663, msg="boom", times=10)
    rate_rule.notify_bot, rate_rule.notify_chat = lark_bot, world.chat_a
    rate_rule.save()
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    assert service.evaluate_rule(rate_rule.pk, now=T0 + HOUR) == rules.FIRE
    alert = Alert.objects.get()
    assert alert.notice == Alert.Notice.FAILED and alert.notice_error
    assert Event.objects.filter(type="alert.fired").count() == 1


def test_alert_events_reach_subscribed_webhooks(world, rate_rule, ratings_at):

    WebhookDestination.objects.create(
        name="alerts",
        url="https://hooks.example.com/al",
        event_types=["alert.fired", "alert.resolved"],
    )
    WebhookDestination.objects.create(
        name="others", url="https://hooks.example.com/o", event_types=["turn.completed"]
    )
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    service.evaluate_rule(rate_rule.pk, now=T0 + HOUR)
    assert list(OutboxItem.objects.values_list("destination__name", "event__type")) == [
        ("alerts", "alert.fired")
    ]


def test_the_alert_worker_once_fills_queues_and_evaluates_rules(
    world, rate_rule, ratings_at, make_queue
):
    queue = make_queue(world.team_a)
    ratings_at(timezone.now() - timedelta(minutes=5), negative=5)
    call_command("alert_worker", "--once")
    assert Alert.objects.filter(rule=rate_rule).count() == 1
    assert ReviewItem.objects.filter(queue=queue).count() == 5


def test_serve_starts_the_alert_worker():
    assert "alert_worker" in WORKER_COMMANDS and "alert_worker" in get_commands()


def test_the_alert_history_page_shows_a_managers_alerts_only(
    world, rate_rule, ratings_at, manager_of, api
):
    other = AlertRule.objects.create(
        name="rule of B",
        team=world.team_b,
        kind="negatives_above",
        threshold=0,
        window_minutes=60,
        clear_margin=0,
    )
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    ratings_at(T0 + timedelta(minutes=10), negative=1, team="b")
    service.evaluate_rule(rate_rule.pk, now=T0 + HOUR)
    service.evaluate_rule(other.pk, now=T0 + HOUR)
    page = api(manager_of(world.team_a)).get("/alerts/?state=open")
    text = page.content.decode()
    assert page.status_code == 200
    assert "positive rate A" in text and "rule of B" not in text
    assert "/dashboard/?from=" in text
    assert api(manager_of(world.team_b)).get("/alerts/").content.decode().count("data-alert=") == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_alert_workers_fire_each_breach_once_on_postgresql(world, rate_rule, ratings_at):
    ratings_at(T0 + timedelta(minutes=10), negative=5)
    rounds, workers = 20, 4
    barrier = threading.Barrier(workers)
    results = []
    lock = threading.Lock()

    def work():
        try:
            for n in range(rounds):
                barrier.wait(timeout=30)
                action = service.evaluate_rule(
                    rate_rule.pk, now=T0 + HOUR + n * timedelta(seconds=1)
                )
                with lock:
                    results.append(action)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == rounds * workers
    assert results.count(rules.FIRE) == 1
    assert Alert.objects.count() == 1
    assert Event.objects.filter(type="alert.fired").count() == 1
