"""`GET /metrics`: Prometheus text exposition for operators' monitoring
(https://prometheus.io/docs/instrumenting/exposition_formats/).

Two kinds of series:

- counters and histograms the processes count as they work (callback answer times, answers
  past the budget, refused callbacks, card-update attempts, webhook attempts): kept by
  `plumbing.metrics` in prometheus-client's multiprocess mode, so any one web process reports
  the sum over every web process and worker of the installation;
- gauges of database state, read when the scrape arrives (`DatabaseCollector`), so every web
  process reports the same figures and no worker has to keep them up to date.

Access (settings): `CARDLOOP_METRICS_TOKEN` — the scraper sends `Authorization: Bearer
<token>` (RFC 6750); `CARDLOOP_METRICS_ALLOW` — addresses or networks (CIDR) whose requests
need no token (the connecting address, `REMOTE_ADDR`; forwarded headers are not trusted).
With neither set the endpoint refuses every request (403 `metrics_not_configured`).
Labels never carry ids of people, chats or messages, tokens, secrets or URLs: destinations
and review queues appear by primary key and name, handlers by kind.
"""

from __future__ import annotations

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client.core import GaugeMetricFamily

from analytics.models import Alert, ReviewItem, ReviewQueue
from feedback.models import OutboxItem, WebhookDestination
from interactions.models import CardUpdate, Interaction, PanelPresence
from plumbing import metrics
from plumbing.workqueue import WorkStatus

#: Work-queue states that still wait for a worker.
WAITING = (WorkStatus.PENDING, WorkStatus.INFLIGHT)


def _age_seconds(oldest, now) -> float:
    return max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0


class DatabaseCollector:
    """prometheus-client collector of database state, read at each scrape (a few aggregate
    queries). Gauges:

    - `cardloop_card_update_queue_depth`, `cardloop_card_update_oldest_seconds` (card updates
      pending or in flight; age of the oldest), `cardloop_card_updates_dead`,
      `cardloop_card_updates_failed` (rows kept until pruned);
    - `cardloop_outbox_pending`, `cardloop_outbox_oldest_pending_seconds`, `cardloop_outbox_dead`
      per `destination` (primary key), and `cardloop_webhook_destination_info{destination,
      name, enabled}` = 1 to name them;
    - `cardloop_interactions_pending{kind}` (approval, quick_reply, form, command, ask);
    - `cardloop_panels_connected` (live question-panel connections);
    - `cardloop_alerts_firing` (alerts fired and not resolved);
    - `cardloop_review_items{queue, status}` (open / claimed) and
      `cardloop_review_oldest_open_seconds{queue}`, queues by primary key, named by
      `cardloop_review_queue_info{queue, name}`.
    """

    def collect(self):
        now = timezone.now()
        yield from self._card_updates(now)
        yield from self._outbox(now)
        yield from self._interactions()
        yield GaugeMetricFamily(
            "cardloop_panels_connected",
            "Question-panel WebSocket connections that are live.",
            value=PanelPresence.objects.live(now).count(),
        )
        yield GaugeMetricFamily(
            "cardloop_alerts_firing",
            "Alerts fired and not resolved yet.",
            value=Alert.objects.filter(resolved_at__isnull=True).count(),
        )
        yield from self._review(now)

    def _card_updates(self, now):
        by_status = dict(
            CardUpdate.objects.values_list("status").annotate(n=Count("id")).order_by()
        )
        oldest = CardUpdate.objects.filter(status__in=WAITING).aggregate(t=Min("created_at"))["t"]
        yield GaugeMetricFamily(
            "cardloop_card_update_queue_depth",
            "Card updates waiting to be applied (pending or in flight).",
            value=sum(by_status.get(s, 0) for s in WAITING),
        )
        yield GaugeMetricFamily(
            "cardloop_card_update_oldest_seconds",
            "Age in seconds of the oldest card update waiting to be applied (0 when none).",
            value=_age_seconds(oldest, now),
        )
        yield GaugeMetricFamily(
            "cardloop_card_updates_dead",
            "Card updates given up after retries (kept until pruned).",
            value=by_status.get(WorkStatus.DEAD, 0),
        )
        yield GaugeMetricFamily(
            "cardloop_card_updates_failed",
            "Card updates Feishu refused for good (kept until pruned).",
            value=by_status.get(WorkStatus.FAILED, 0),
        )

    def _outbox(self, now):
        labels = ["destination"]
        pending = GaugeMetricFamily(
            "cardloop_outbox_pending",
            "Webhook events waiting for delivery (pending or in flight), per destination.",
            labels=labels,
        )
        oldest = GaugeMetricFamily(
            "cardloop_outbox_oldest_pending_seconds",
            "Age in seconds of the oldest webhook event waiting for delivery, per destination.",
            labels=labels,
        )
        dead = GaugeMetricFamily(
            "cardloop_outbox_dead",
            "Webhook events given up after retries, per destination (re-queue in the admin).",
            labels=labels,
        )
        info = GaugeMetricFamily(
            "cardloop_webhook_destination_info",
            "Webhook destinations: primary key, name and whether enabled (value 1).",
            labels=["destination", "name", "enabled"],
        )
        waiting = {
            row["destination_id"]: row
            for row in OutboxItem.objects.filter(status__in=WAITING)
            .values("destination_id")
            .annotate(n=Count("id"), oldest=Min("created_at"))
            .order_by()
        }
        dead_counts = dict(
            OutboxItem.objects.filter(status=WorkStatus.DEAD)
            .values_list("destination_id")
            .annotate(n=Count("id"))
            .order_by()
        )
        for pk, name, enabled in WebhookDestination.objects.values_list(
            "pk", "name", "enabled"
        ).order_by("pk"):
            key = str(pk)
            row = waiting.get(pk) or {"n": 0, "oldest": None}
            pending.add_metric([key], row["n"])
            oldest.add_metric([key], _age_seconds(row["oldest"], now))
            dead.add_metric([key], dead_counts.get(pk, 0))
            info.add_metric([key, name, "true" if enabled else "false"], 1)
        yield from (pending, oldest, dead, info)

    def _interactions(self):
        family = GaugeMetricFamily(
            "cardloop_interactions_pending",
            "Interactions waiting for a person's answer, by kind.",
            labels=["kind"],
        )
        counts = dict(
            Interaction.objects.pending().values_list("kind").annotate(n=Count("id")).order_by()
        )
        for kind in Interaction.Kind.values:
            family.add_metric([kind], counts.get(kind, 0))
        yield family

    def _review(self, now):
        items = GaugeMetricFamily(
            "cardloop_review_items",
            "Review items not done yet, per queue (primary key) and status (open, claimed).",
            labels=["queue", "status"],
        )
        oldest = GaugeMetricFamily(
            "cardloop_review_oldest_open_seconds",
            "Age in seconds of the oldest open review item, per queue (0 when none).",
            labels=["queue"],
        )
        info = GaugeMetricFamily(
            "cardloop_review_queue_info",
            "Review queues: primary key and name (value 1).",
            labels=["queue", "name"],
        )
        open_statuses = (ReviewItem.Status.OPEN, ReviewItem.Status.CLAIMED)
        counts = {
            (q, s): n
            for q, s, n in ReviewItem.objects.filter(status__in=open_statuses)
            .values_list("queue_id", "status")
            .annotate(n=Count("id"))
            .order_by()
        }
        oldest_open = dict(
            ReviewItem.objects.filter(status=ReviewItem.Status.OPEN)
            .values_list("queue_id")
            .annotate(t=Min("queued_at"))
            .order_by()
        )
        for pk, name in ReviewQueue.objects.values_list("pk", "name").order_by("pk"):
            key = str(pk)
            for status in open_statuses:
                items.add_metric([key, status], counts.get((pk, status), 0))
            oldest.add_metric([key], _age_seconds(oldest_open.get(pk), now))
            info.add_metric([key, name], 1)
        yield from (items, oldest, info)


@lru_cache(maxsize=8)
def _networks(allow: tuple[str, ...]):
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in allow)


def allowed_networks() -> tuple:
    """`CARDLOOP_METRICS_ALLOW` as `ipaddress` networks (a bare address is a /32 or /128).
    Raises ValueError for an entry that is not an address or network (the system check
    `cardloop.E010` reports it at start)."""
    return _networks(tuple(settings.CARDLOOP_METRICS_ALLOW))


def _client_allowed(request) -> bool:
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in allowed_networks())


def _bearer(request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None if not header else ""
    return credentials.strip()


def _refuse(status: int, code: str, detail: str) -> JsonResponse:
    response = JsonResponse({"error": code, "detail": detail}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@require_GET
def metrics_view(request):
    """`GET /metrics` → 200 Prometheus text format (version 0.0.4) of every process's counters
    and histograms and the database gauges (`DatabaseCollector`).

    Refusals (JSON `{"error", "detail"}`): 403 `metrics_not_configured` when neither
    `CARDLOOP_METRICS_TOKEN` nor `CARDLOOP_METRICS_ALLOW` is set; 401 `invalid_token` for an
    Authorization header that is not `Bearer <the token>`; 401 `missing_token` /
    403 `address_not_allowed` for a request without one from an address outside the allow
    list."""
    token = settings.CARDLOOP_METRICS_TOKEN
    allow = settings.CARDLOOP_METRICS_ALLOW
    if not token and not allow:
        return _refuse(
            403,
            "metrics_not_configured",
            "Set CARDLOOP_METRICS_TOKEN or CARDLOOP_METRICS_ALLOW to enable /metrics.",
        )
    given = _bearer(request)
    if given is not None:
        if not token or not hmac.compare_digest(given.encode(), token.encode()):
            return _refuse(401, "invalid_token", "The metrics bearer token does not match.")
    elif not (allow and _client_allowed(request)):
        if token:
            return _refuse(
                401, "missing_token", "Send Authorization: Bearer <CARDLOOP_METRICS_TOKEN>."
            )
        return _refuse(403, "address_not_allowed", "This address is not in CARDLOOP_METRICS_ALLOW.")
    body, content_type = metrics.render(DatabaseCollector())
    return HttpResponse(body, content_type=content_type)
