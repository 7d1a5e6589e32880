"""`manage.py lark_replay` against a live server over real HTTP: the fixture is encrypted and
signed exactly as Feishu does, so the server's real verification path accepts it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command, execute_from_command_line

from interactions.callbacks import registry
from interactions.management.commands.lark_replay import parse_assignment, set_path
from tests import feishu

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def replay(live_server, lark_bot, monkeypatch):
    # A server process imports lark-oapi (several seconds) at startup through its system
    # checks; the live server thread would do it on the first request instead.
    import interactions.channels.feishu.ingress  # noqa: F401

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    def run(name: str, *args: str) -> str:
        out = io.StringIO()
        call_command(
            "lark_replay",
            str(feishu.FIXTURES / f"{name}.json"),
            "--app",
            lark_bot.app_id,
            "--url",
            live_server.url,
            "--timeout",
            "30",
            *args,
            stdout=out,
        )
        return out.getvalue()

    return run


def _answer(output: str) -> dict:
    return json.loads(output[output.index("{") :])


def test_replayed_feedback_click_reaches_the_handler_with_the_set_value(
    replay, register_card_handler
):
    seen = []

    def handler(action):
        seen.append(action)
        return registry.Answer.success("Recorded")

    register_card_handler("feedback", handler)
    output = replay("card_action_feedback_click", "--set", "event.action.value.delivery=del_x")
    assert "(card.action.trigger, event_id=" in output and "encrypted)" in output
    assert "\n200 in " in output and " ms\n" in output
    assert _answer(output)["toast"]["i18n"]["en_us"] == "Recorded"
    (action,) = seen
    assert action.value["delivery"] == "del_x"
    assert action.operator_open_id == "ou_requester"


def test_a_replayed_lone_surrogate_is_sent_as_an_escape_and_refused_with_a_toast(
    replay, register_card_handler
):
    # the way to check the server's refusal by hand; the replay raised UnicodeEncodeError
    runs = []
    register_card_handler("feedback", runs.append)
    output = replay("card_action_feedback_click", "--set", "event.action.value.delivery=x\ud800")
    assert _answer(output)["toast"]["type"] == "warning"
    assert runs == []


def test_each_replay_gets_a_fresh_event_id_unless_one_is_set(replay, register_card_handler):
    runs = []
    register_card_handler("feedback", runs.append)
    replay("card_action_feedback_click")
    replay("card_action_feedback_click")
    assert len(runs) == 2
    replay("card_action_feedback_click", "--set", "header.event_id=fixed")
    replay("card_action_feedback_click", "--set", "header.event_id=fixed")
    assert len(runs) == 3


def test_replay_runs_outside_debug_without_a_production_secret_key(
    live_server, lark_bot, monkeypatch, settings, register_card_handler, capsys
):
    # A newcomer runs the README's replay in a second shell, without make run's DJANGO_DEBUG:
    # the client must not be refused by the serving checks (cardloop.E001). The command line
    # path (not call_command) is the one that runs system checks.
    import interactions.channels.feishu.ingress  # noqa: F401

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    settings.DEBUG = False
    settings.SECRET_KEY = settings.MISSING_SECRET_KEY
    register_card_handler("feedback", lambda action: registry.Answer.success("Recorded"))
    execute_from_command_line(
        [
            "manage.py",
            "lark_replay",
            str(feishu.FIXTURES / "card_action_feedback_click.json"),
            "--app",
            lark_bot.app_id,
            "--url",
            live_server.url,
            "--timeout",
            "30",
        ]
    )
    assert _answer(capsys.readouterr().out)["toast"]["type"] == "success"


def test_plain_replay_is_signed_and_accepted(replay, register_card_handler):
    runs = []
    register_card_handler("feishu_ask", runs.append)
    output = replay(
        "card_action_ask_submit", "--plain", "--set", 'event.action.form_value.q1=["2"]'
    )
    assert "plain)" in output and "\n200 in " in output
    assert runs[0].form_value["q1"] == ["2"]


def test_url_verification_replay_gets_the_challenge(replay):
    output = replay("url_verification")
    assert _answer(output) == {"challenge": "ajls384kdjx98XX"}


def test_refused_replay_prints_the_answer_and_exits_non_zero(live_server, lark_bot, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    out = io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command(
            "lark_replay",
            str(feishu.FIXTURES / "card_action_feedback_click.json"),
            "--app",
            lark_bot.app_id,
            "--url",
            live_server.url,
            "--timeout",
            "30",
            "--set",
            "header.token=forged",
            stdout=out,
        )
    assert info.value.returncode == 1
    assert "401 in" in out.getvalue() and '"invalid_token"' in out.getvalue()


def test_unknown_app_and_unreadable_fixture_are_command_errors(lark_bot, tmp_path):
    with pytest.raises(CommandError, match="No bot"):
        call_command(
            "lark_replay", str(feishu.FIXTURES / "url_verification.json"), "--app", "cli_x"
        )
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CommandError, match="Cannot read"):
        call_command("lark_replay", str(broken), "--app", lark_bot.app_id)


def test_set_paths_create_objects_index_lists_and_parse_json_values():
    payload = {"event": {"items": [{"a": 1}]}}
    set_path(payload, "event.items.0.a", 2)
    set_path(payload, "event.new.deep", "x")
    assert payload == {"event": {"items": [{"a": 2}], "new": {"deep": "x"}}}
    with pytest.raises(ValueError):
        set_path(payload, "event.items.5.a", 1)
    assert parse_assignment('a.b=["0","2"]') == ("a.b", ["0", "2"])
    assert parse_assignment("a=del_x") == ("a", "del_x")
    assert parse_assignment("a==x") == ("a", "=x")
    with pytest.raises(ValueError):
        parse_assignment("no-equals")


@pytest.fixture
def daphne(lark_bot, tmp_path):
    """Cardloop under a real Daphne process on an ephemeral port, sharing the test database
    and the secret directory; yields its base URL."""
    import socket
    import subprocess
    import sys

    from tests.processes import child_env, wait_until_serving

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    env = child_env(DJANGO_ALLOWED_HOSTS="127.0.0.1")
    log = (tmp_path / "daphne.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), "cardloop.asgi:application"],
        env=env,
        pass_fds=[sock.fileno()],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    sock.close()
    try:
        wait_until_serving(f"{url}/healthz", process, tmp_path / "daphne.log")
        yield url
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def test_replay_against_a_live_daphne_is_verified_answered_and_deduplicated(daphne, lark_bot):
    from interactions.models import InboundEvent

    def run(*args):
        out = io.StringIO()
        call_command("lark_replay", *args, "--app", lark_bot.app_id, "--url", daphne, stdout=out)
        return out.getvalue()

    assert _answer(run(str(feishu.FIXTURES / "url_verification.json"))) == {
        "challenge": "ajls384kdjx98XX"
    }
    click = str(feishu.FIXTURES / "card_action_feedback_click.json")
    first = run(
        click,
        "--set",
        "header.event_id=evt_daphne",
        "--set",
        "event.action.value.kind=no_such_kind",
    )
    again = run(
        click,
        "--set",
        "header.event_id=evt_daphne",
        "--set",
        "event.action.value.kind=no_such_kind",
    )
    assert _answer(first)["toast"]["type"] == "warning"
    assert _answer(again) == _answer(first)
    row = InboundEvent.objects.get(event_id="evt_daphne")
    assert row.status == InboundEvent.Status.ANSWERED
