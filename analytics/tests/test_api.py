"""The analytics API: authentication, scoping, filters and their errors, CSV, schema."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from analytics.csv_export import COLUMNS

ENDPOINTS = ["summary", "trend", "reasons", "failures", "deliveries"]
RANGE = {"from": "2025-03-10", "to": "2025-03-11", "tz": "UTC"}


@pytest.fixture
def two_teams(make_delivery, rate, world):
    """Team A: one delivery rated negative; team B: one delivery rated negative, one failed,
    and a dead outbox row."""
    from feedback.models import Event, OutboxItem, WebhookDestination

    a = make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), team="a", model="model-a")
    b = make_delivery(at=datetime(2025, 3, 10, 2, tzinfo=UTC), team="b", model="model-b")
    make_delivery(at=datetime(2025, 3, 10, 3, tzinfo=UTC), team="b", status="failed")
    rate(a, "ou_a1", "wrong", reason="inaccurate", comment="A's private comment")
    rate(b, "ou_b1", "wrong", reason="too_slow", comment="B's private comment")
    dest = WebhookDestination.objects.create(name="hook-b", url="https://hooks.example.com/b")
    event = Event.objects.create(
        event_id="evt_b", type="turn.completed", delivery=b, team=b.team, body="{}"
    )
    OutboxItem.objects.create(
        event=event,
        destination=dest,
        body="{}",
        status="dead",
        created_at=datetime(2025, 3, 10, 4, tzinfo=UTC),
    )
    return a, b


def _csv(response):
    body = b"".join(response.streaming_content)
    assert body.startswith("\ufeff".encode())
    return list(csv.reader(io.StringIO(body.decode("utf-8-sig"))))


@pytest.mark.parametrize("endpoint", [*ENDPOINTS, "deliveries.csv"])
def test_unauthenticated_is_401_json(api, endpoint, db):
    response = api().get(f"/api/v1/analytics/{endpoint}", RANGE)
    assert response.status_code == 401
    assert response["Content-Type"].startswith("application/json")
    assert response.json()["error"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("endpoint", [*ENDPOINTS, "deliveries.csv"])
def test_logged_in_user_without_a_team_is_403(api, endpoint, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="pw-tests-only")
    response = api(user).get(f"/api/v1/analytics/{endpoint}", RANGE)
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


def test_bot_api_key_is_not_a_manager(bot_client):
    bot_client.credentials(HTTP_AUTHORIZATION=f"Token {bot_client.raw_key}")
    assert bot_client.get("/api/v1/analytics/summary", RANGE).status_code == 401


def test_token_auth_works_for_a_manager(two_teams, world, manager_of, api):
    from botadmin import services

    raw, _token = services.issue_manager_token("test", manager_of(world.team_a))
    client = api()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    response = client.get("/api/v1/analytics/summary", RANGE)
    assert response.status_code == 200
    assert response.json()["current"]["delivered"] == 1


def test_manager_of_team_a_sees_nothing_of_team_b_in_any_endpoint(
    two_teams, world, manager_of, api
):
    client = api(manager_of(world.team_a))
    summary = client.get("/api/v1/analytics/summary", RANGE).json()["current"]
    assert (summary["delivered"], summary["ratings"], summary["negative"]) == (1, 1, 1)
    trend = client.get("/api/v1/analytics/trend", RANGE).json()["buckets"]
    assert sum(b["delivered"] for b in trend) == 1
    reasons = client.get("/api/v1/analytics/reasons", RANGE).json()["reasons"]
    assert [r["key"] for r in reasons] == ["inaccurate"]
    failures = client.get("/api/v1/analytics/failures", RANGE).json()
    assert failures["deliveries"]["failed"] == 0 and failures["outbox"]["failed"] == 0
    rows = client.get("/api/v1/analytics/deliveries", RANGE).json()["results"]
    assert [r["team"]["name"] for r in rows] == ["Team A"]
    lines = _csv(client.get("/api/v1/analytics/deliveries.csv", RANGE))
    assert [line[COLUMNS.index("team")] for line in lines[1:]] == ["Team A"]
    # Asking for team B by id is no way around the scope: it is filtered, not trusted.
    team_b = {**RANGE, "team": world.team_b.id}
    assert client.get("/api/v1/analytics/summary", team_b).json()["current"]["delivered"] == 0
    assert client.get("/api/v1/analytics/deliveries", team_b).json()["results"] == []
    assert len(_csv(client.get("/api/v1/analytics/deliveries.csv", team_b))) == 1  # header only
    assert client.get("/api/v1/analytics/failures", team_b).json()["outbox"]["failed"] == 0


def test_manager_of_both_teams_and_superuser_see_both(two_teams, world, manager_of, api, superuser):
    for user in (manager_of(world.team_a, world.team_b), superuser):
        body = api(user).get("/api/v1/analytics/summary", RANGE).json()["current"]
        assert body["delivered"] == 3
        failures = api(user).get("/api/v1/analytics/failures", RANGE).json()
        assert failures["outbox"]["by_status"]["dead"] == 1


@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"to": "2025-03-11"}, "missing_from", "from"),
        ({"from": "2025-03-10"}, "missing_to", "to"),
        ({"from": "2025-03-11", "to": "2025-03-10"}, "invalid_range", "to"),
        ({"from": "2025-03-10", "to": "2025-03-10"}, "invalid_range", "to"),
        ({"from": "2024-01-01", "to": "2025-01-02"}, "range_too_large", "to"),
        ({"from": "last week", "to": "2025-03-10"}, "invalid_from", "from"),
        # Year 1 in Asia/Shanghai is before datetime.min in UTC; year 9999 leaves no room for
        # the 366-day span check: both overflowed into 500s.
        ({"from": "0001-01-01", "to": "0001-01-02"}, "out_of_range", "from"),
        ({"from": "9999-12-30", "to": "9999-12-31"}, "out_of_range", "from"),
        ({"from": "2025-03-10", "to": "9999-12-31T23:59:59-12:00"}, "out_of_range", "to"),
        ({**RANGE, "status": "exploded"}, "invalid_filter", "status"),
        ({**RANGE, "semantic": "meh"}, "invalid_filter", "semantic"),
        ({**RANGE, "team": "A"}, "invalid_filter", "team"),
        # past 64 bits the database refused the id: a 500 (the CSV export never answered)
        ({**RANGE, "team": str(2**63)}, "invalid_filter", "team"),
        ({**RANGE, "team": "0"}, "invalid_filter", "team"),
        ({**RANGE, "verdict": "Bad Key"}, "invalid_filter", "verdict"),
        ({**RANGE, "model": "m" * 101}, "invalid_filter", "model"),
        ({**RANGE, "tz": "Asia/Nowhere"}, "unknown_tz", "tz"),
    ],
)
@pytest.mark.parametrize("endpoint", [*ENDPOINTS, "deliveries.csv"])
def test_bad_parameters_are_400_json_naming_the_parameter(
    api, superuser, endpoint, params, code, field
):
    response = api(superuser).get(f"/api/v1/analytics/{endpoint}", params)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == code
    assert field in body["detail"]


def test_a_range_of_exactly_366_days_is_accepted(api, superuser):
    response = api(superuser).get(
        "/api/v1/analytics/summary", {"from": "2024-01-01", "to": "2025-01-01", "tz": "UTC"}
    )
    assert response.status_code == 200


@pytest.mark.parametrize("param", ["model", "topic", "chat", "bot", "task", "workflow", "skill"])
def test_sql_injection_in_a_filter_matches_nothing_and_changes_nothing(
    two_teams, api, superuser, param
):
    from feedback.models import Delivery

    before = Delivery.objects.count()
    client = api(superuser)
    for endpoint in ENDPOINTS:
        response = client.get(f"/api/v1/analytics/{endpoint}", {**RANGE, param: "' OR 1=1 --"})
        assert response.status_code == 200, (endpoint, response.content)
    summary = client.get("/api/v1/analytics/summary", {**RANGE, param: "' OR 1=1 --"}).json()
    assert summary["current"]["delivered"] == 0
    assert (
        client.get("/api/v1/analytics/deliveries", {**RANGE, param: "' OR 1=1 --"}).json()[
            "results"
        ]
        == []
    )
    assert Delivery.objects.count() == before


def test_injection_in_a_key_filter_is_refused(api, superuser):
    response = api(superuser).get("/api/v1/analytics/summary", {**RANGE, "reason": "' OR 1=1 --"})
    assert response.status_code == 400 and "reason" in response.json()["detail"]


def test_drill_down_rows_are_redacted_and_carry_labels(two_teams, api, superuser):
    response = api(superuser).get(
        "/api/v1/analytics/deliveries", {**RANGE, "team": two_teams[0].team_id}
    )
    text = response.content.decode()
    for secret in (
        "private comment",
        "ou_a1",
        "ou_requester_secret",
        "card_",
        "policy_snapshot",
        "om_",
    ):
        assert secret not in text
    row = response.json()["results"][0]
    assert row["ratings"] == [
        {
            "semantic": "negative",
            "verdict_key": "wrong",
            "verdict_label": "不对",
            "reason_key": "inaccurate",
            "reason_label": "不准确",
            "revision": 1,
            "rated_at": "2025-03-10T01:00:00Z",
        }
    ]


def test_rating_filter_lists_only_deliveries_with_a_matching_rating(two_teams, api, superuser):
    client = api(superuser)
    rows = client.get("/api/v1/analytics/deliveries", {**RANGE, "reason": "too_slow"}).json()[
        "results"
    ]
    assert [r["delivery_id"] for r in rows] == [two_teams[1].delivery_id]
    everything = client.get("/api/v1/analytics/deliveries", RANGE).json()["results"]
    assert len(everything) == 3


def test_csv_has_bom_header_and_local_times(two_teams, api, superuser):
    response = api(superuser).get(
        "/api/v1/analytics/deliveries.csv", {**RANGE, "tz": "Asia/Shanghai"}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert (
        response["Content-Disposition"]
        == 'attachment; filename="cardloop-deliveries-20250310-20250311.csv"'
    )
    lines = _csv(response)
    assert lines[0][:3] == ["投递 ID", "发送时间", "状态"]  # the reader's language (zh-hans)
    assert len(lines[0]) == len(COLUMNS)
    body = [dict(zip(COLUMNS, line, strict=True)) for line in lines[1:]]
    # Shanghai 03-10 is UTC 03-09 16:00 .. 03-10 16:00: all three deliveries, newest first.
    assert [line["sent_at"] for line in body] == [
        "2025-03-10T11:00:00+08:00",
        "2025-03-10T10:00:00+08:00",
        "2025-03-10T09:00:00+08:00",
    ]
    assert (
        body[2]["reason_label"] == "不准确" and body[2]["rated_at"] == "2025-03-10T09:00:00+08:00"
    )


def test_csv_header_for_an_english_reader_is_the_column_names(two_teams, api, superuser):
    response = api(superuser).get(
        "/api/v1/analytics/deliveries.csv", RANGE, HTTP_ACCEPT_LANGUAGE="en"
    )
    assert tuple(_csv(response)[0]) == COLUMNS


def test_csv_lines_per_rating_and_for_unrated_deliveries(two_teams, rate, api, superuser):
    a = two_teams[0]
    rate(a, "ou_a2", "conclusive_usable")
    lines = _csv(api(superuser).get("/api/v1/analytics/deliveries.csv", RANGE))
    body = [dict(zip(COLUMNS, line, strict=True)) for line in lines[1:]]
    a_lines = [line for line in body if line["delivery_id"] == a.delivery_id]
    assert sorted(line["verdict_label"] for line in a_lines) == ["不对", "有用"]
    assert a_lines[0]["sent_at"] == "2025-03-10T01:00:00+00:00"
    failed = [line for line in body if line["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["semantic"] == "" and failed[0]["rated_at"] == ""
    assert len(body) == 4
    raw = "\n".join(",".join(line) for line in lines)
    assert "private comment" not in raw and "ou_a1" not in raw and "ou_requester_secret" not in raw


def test_csv_neutralises_spreadsheet_formulas(make_delivery, api, superuser):
    make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), model='=HYPERLINK("x")')
    lines = _csv(api(superuser).get("/api/v1/analytics/deliveries.csv", RANGE))
    assert lines[1][COLUMNS.index("model")] == '\'=HYPERLINK("x")'


def test_post_is_405_json(api, superuser):
    response = api(superuser).post("/api/v1/analytics/summary", {}, format="json")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_page_size_and_cursor_errors_name_the_parameter(api, superuser):
    client = api(superuser)
    for size in ("0", "101", "ten"):
        response = client.get("/api/v1/analytics/deliveries", {**RANGE, "page_size": size})
        assert response.status_code == 400 and "page_size" in response.json()["detail"]
    response = client.get("/api/v1/analytics/deliveries", {**RANGE, "cursor": "not-a-cursor"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_cursor"


def test_openapi_schema_validates_with_zero_warnings(db):
    from django.core.management import call_command

    out = io.StringIO()
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", "/dev/null", stdout=out, stderr=out
    )


def test_schema_documents_the_filter_parameters(api, superuser):
    import yaml

    schema = yaml.safe_load(api(superuser).get("/api/schema/").content)
    params = {
        p["name"]: p for p in schema["paths"]["/api/v1/analytics/summary"]["get"]["parameters"]
    }
    assert params["from"]["required"] is True and params["to"]["required"] is True
    assert set(params["semantic"]["schema"]["enum"]) == {"positive", "progress", "negative"}
    assert {
        "team",
        "bot",
        "chat",
        "topic",
        "model",
        "cli",
        "cli_version",
        "skill",
        "skill_version",
        "workflow",
        "task",
        "status",
        "semantic",
        "verdict",
        "reason",
        "tz",
    } <= set(params)


def test_swagger_ui_is_served_without_a_cdn(client, superuser):
    client.force_login(superuser)
    html = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in html
    for cdn in ("cdn.jsdelivr", "unpkg.com", "cdnjs"):
        assert cdn not in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert (
        client.get(
            "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        ).status_code
        == 200
    )


@pytest.mark.django_db(transaction=True)
async def test_csv_streams_chunk_by_chunk_under_asgi(world, make_delivery, superuser, recwarn):
    """Under Daphne (ASGI) the CSV must be an async stream: Django reads a sync iterator to the
    end into memory first (with a warning) before sending a byte."""
    from asgiref.sync import sync_to_async
    from django.test import AsyncClient

    @sync_to_async
    def setup():
        for i in range(1200):
            make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC) + timedelta(seconds=i))

    await setup()
    client = AsyncClient()
    await client.aforce_login(superuser)
    response = await client.get("/api/v1/analytics/deliveries.csv", RANGE)
    assert response.status_code == 200
    assert response.is_async
    chunks = [chunk async for chunk in response.streaming_content]
    assert len(chunks) > 2  # sent in pieces, not as one buffered body
    body = b"".join(chunks).decode("utf-8-sig").splitlines()
    assert len(body) == 1 + 1200
    assert not [w for w in recwarn if "StreamingHttpResponse" in str(w.message)]
    from django.db import connections

    await sync_to_async(connections.close_all)()  # the sync thread's connection (PostgreSQL)


def test_a_failing_csv_query_is_answered_as_an_error_not_a_stream_that_never_starts(
    two_teams, api, superuser, monkeypatch
):
    from analytics import queries

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")
        yield  # a generator, like the real one

    monkeypatch.setattr(queries, "iter_delivery_rows", broken)
    client = api(superuser)
    client.raise_request_exception = False
    response = client.get("/api/v1/analytics/deliveries.csv", RANGE)
    assert response.status_code == 500
    assert response.json()["error"] == "server_error"


def test_a_bot_api_key_is_not_an_analytics_credential(make_bot, make_api_key):
    from rest_framework.test import APIClient

    raw, _key = make_api_key(make_bot(app_id="cli_analytics_probe"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = client.get("/api/v1/analytics/summary", RANGE)
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"


def test_channel_filter_counts_and_lists_only_that_channels_answers(
    make_delivery, rate, world, manager_of, api
):
    feishu = make_delivery(at=datetime(2025, 3, 10, 1, tzinfo=UTC), team="a")
    slack = make_delivery(at=datetime(2025, 3, 10, 2, tzinfo=UTC), team="a", channel="slack")
    rate(feishu, "ou_a1", "wrong", reason="inaccurate")
    rate(slack, "U0SLACK1", "conclusive_usable")
    client = api(manager_of(world.team_a))
    for channel, expected in (("slack", slack), ("feishu", feishu)):
        params = {**RANGE, "channel": channel}
        summary = client.get("/api/v1/analytics/summary", params).json()["current"]
        assert (summary["delivered"], summary["ratings"]) == (1, 1)
        rows = client.get("/api/v1/analytics/deliveries", params).json()["results"]
        assert [(r["delivery_id"], r["channel"]) for r in rows] == [
            (expected.delivery_id, channel)
        ]
        lines = _csv(client.get("/api/v1/analytics/deliveries.csv", params))
        assert [line[COLUMNS.index("channel")] for line in lines[1:]] == [channel]
    both = client.get("/api/v1/analytics/summary", RANGE).json()["current"]
    assert (both["delivered"], both["positive"], both["negative"]) == (2, 1, 1)


def test_an_unknown_channel_is_400_naming_the_parameter(world, manager_of, api):
    response = api(manager_of(world.team_a)).get(
        "/api/v1/analytics/summary", {**RANGE, "channel": "carrier_pigeon"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_filter"
    assert list(response.json()["detail"]) == ["channel"]


def test_reused_serializers_render_what_new_ones_render(two_teams, world, superuser, manager_of):
    """`serializers.represent` reuses one bound serializer per class; the JSON must be what a
    serializer made for the call gives, for every response shape and for different data."""
    from analytics import access, queries, serializers
    from analytics.filters import AnalyticsFilterSet
    from feedback.models import Delivery

    fs = AnalyticsFilterSet(data=RANGE, queryset=Delivery.objects.none())
    assert fs.is_valid()
    query = fs.query
    for user in (superuser, manager_of(world.team_a)):
        scope = access.scope_for(user)
        page = queries.deliveries_page(query, scope, cursor=None, page_size=2)
        shapes = [
            (serializers.SummarySerializer, queries.summary(query, scope)),
            (serializers.TrendSerializer, queries.trend(query, scope)),
            (serializers.ReasonsSerializer, queries.reasons(query, scope)),
            (serializers.FailuresSerializer, queries.failures(query, scope)),
            (
                serializers.DeliveryPageSerializer,
                {
                    "results": page.rows,
                    "next": page.next,
                    "previous": page.previous,
                    "page_size": 2,
                },
            ),
        ]
        for serializer_class, data in shapes:
            assert serializers.represent(serializer_class, data) == serializer_class(data).data


def test_filter_sets_share_their_filters_yet_validate_each_request_on_its_own():
    from analytics.filters import AnalyticsFilterSet

    good = AnalyticsFilterSet(data={**RANGE, "model": "gpt-x"})
    bad = AnalyticsFilterSet(data={**RANGE, "team": "not-a-number"})
    assert good.filters is bad.filters is AnalyticsFilterSet.base_filters
    assert good.is_valid() and not bad.is_valid()
    assert good.query.delivery_filters == {"model": "gpt-x"}
    assert bad.error_code_and_detail()[0] == "invalid_filter"
    assert "team" in bad.error_code_and_detail()[1]


def test_filter_forms_sharing_their_fields_validate_each_request_on_its_own(db):
    """The filter form's instances share the class's fields (no deep copy per request): an
    invalid request must not leave anything behind that changes the next one's answer."""
    from analytics.filters import AnalyticsFilterSet
    from feedback.models import Delivery

    def parse(params):
        fs = AnalyticsFilterSet(data=params, queryset=Delivery.objects.none())
        return fs.is_valid(), fs

    ok, bad = parse({**RANGE, "team": "0", "channel": "fax", "verdict": "Not A Key"})
    assert not ok
    assert set(bad.error_code_and_detail()[1]) == {"team", "channel", "verdict"}
    ok, good = parse({**RANGE, "team": "7", "channel": "slack", "verdict": "wrong"})
    assert ok
    assert good.query.delivery_filters == {"team": 7, "channel": "slack"}
    assert good.query.rating_filters == {"verdict": "wrong"}
    assert good.form.fields is not bad.form.fields
    assert good.form.fields["team"] is bad.form.fields["team"]
