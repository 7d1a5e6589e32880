"""The progress card renderer (pure, no I/O): every state valid Card JSON 2.0, forms only when
running, submit inside the form and cancel / details outside, a multi-select as one select
(never a button per option)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from interactions.lark.cardjson import validate_card
from interactions.models import Ask, Interaction, ProgressSession
from interactions.render import progress_cards
from interactions.tests.ask_helpers import QUESTIONS, REQUESTER, SESSION, forms_of


def session(**overrides) -> ProgressSession:
    values = {
        "session_id": SESSION,
        "receive_id": "oc_group_chat",
        "requester_open_id": REQUESTER,
        "status": "running",
        "title": "Deploying the service",
        "summary": "Step 2 of 5",
        "tool_lines": ["bash: make build", "read: settings.py"],
    }
    values.update(overrides)
    return ProgressSession(**values)


def ask(form_index=0, questions=QUESTIONS, **overrides) -> Ask:
    now = timezone.now()
    values = {
        "public_id": f"ask_{form_index:016x}",
        "kind": Interaction.Kind.ASK,
        "session_id": SESSION,
        "requester_open_id": REQUESTER,
        "questions": questions,
        "form_index": form_index,
        "created_at": now,
        "expires_at": now + timedelta(minutes=15),
        "status": "pending",
    }
    values.update(overrides)
    return Ask(**values)


def components(node):
    if isinstance(node, dict):
        if node.get("tag"):
            yield node
        for value in node.values():
            yield from components(value)
    elif isinstance(node, list):
        for item in node:
            yield from components(item)


def buttons_outside_forms(card):
    return [
        c
        for e in card["body"]["elements"]
        if e.get("tag") != "form"
        for c in components(e)
        if c["tag"] == "button"
    ]


@pytest.mark.parametrize("status", [s for s, _label in ProgressSession.Status.choices])
def test_every_state_renders_a_valid_card(status):
    card = progress_cards.render(session(status=status), [ask(0), ask(1)])
    assert validate_card(card) == []


def test_running_card_with_one_single_and_one_multi_question():
    card = progress_cards.render(session(), [ask()])
    (form,) = forms_of(card)
    assert form["name"] == "ask_0"
    fields = [c for c in components(form["elements"]) if c.get("name")]
    by_name = {c["name"]: c for c in fields}
    assert by_name["q0"]["tag"] == "select_static"
    assert by_name["q1"]["tag"] == "multi_select_static"
    assert [o["value"] for o in by_name["q1"]["options"]] == ["0", "1", "2"]
    assert [o["text"]["content"] for o in by_name["q0"]["options"]] == ["SQLite", "PostgreSQL"]
    # none required, "other" inputs c<i>
    assert all(c.get("required") is False for c in fields if c["tag"] != "button")
    assert by_name["c0"]["tag"] == "input" and by_name["c1"]["tag"] == "input"
    # descriptions in markdown
    markdown = " ".join(
        c["content"] for c in components(form["elements"]) if c["tag"] == "markdown"
    )
    assert "Single file, zero setup" in markdown and "makemigrations --check" in markdown
    assert "Database" in markdown


def test_submit_is_inside_the_form_and_cancel_and_details_are_outside():
    card = progress_cards.render(session(), [ask()])
    (form,) = forms_of(card)
    (submit,) = [c for c in components(form["elements"]) if c["tag"] == "button"]
    assert submit["form_action_type"] == "submit" and submit["name"] == "ask_0_submit"
    assert submit["behaviors"][0]["value"] == {
        "kind": "feishu_ask",
        "act": "submit",
        "sessionId": SESSION,
        "requestId": "ask_0000000000000000",
        "sender": REQUESTER,
    }
    outside = buttons_outside_forms(card)
    values = [b["behaviors"][0].get("value") for b in outside]
    assert {"kind": "progress", "act": "cancel", "sessionId": SESSION} in values
    assert {"kind": "progress", "act": "details", "sessionId": SESSION} in values
    assert all("form_action_type" not in b for b in outside)
    # the buttons come after every form
    tags = [e["tag"] for e in card["body"]["elements"]]
    assert tags.index("column_set") > tags.index("form")


def test_multi_select_is_never_rendered_as_one_button_per_option():
    card = progress_cards.render(session(), [ask()])
    text = json.dumps(card, ensure_ascii=False)
    labels = [o["label"] for q in QUESTIONS for o in q["options"]]
    for button in components(card):
        if button["tag"] == "button":
            assert button["text"]["content"] not in labels
    assert text.count('"multi_select_static"') == 1
    (form,) = forms_of(card)
    assert sum(1 for c in components(form) if c["tag"] == "button") == 1


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "recovering"])
def test_terminal_and_recovering_states_render_no_forms_and_no_cancel(status):
    card = progress_cards.render(session(status=status), [ask(0), ask(1)])
    assert forms_of(card) == []
    values = [b["behaviors"][0].get("value") or {} for b in buttons_outside_forms(card)]
    assert all(v.get("act") != "cancel" for v in values)
    assert not any(c["tag"] in ("select_static", "multi_select_static") for c in components(card))


def test_recovering_shows_the_recovery_text():
    card = progress_cards.render(session(status="recovering"), [])
    ids = [e.get("element_id") for e in card["body"]["elements"]]
    assert "progress_recovery" in ids
    running = progress_cards.render(session(), [])
    assert "progress_recovery" not in [e.get("element_id") for e in running["body"]["elements"]]


def test_stacked_asks_are_separate_forms_with_card_unique_names():
    card = progress_cards.render(session(), [ask(1), ask(0)])
    assert [f["name"] for f in forms_of(card)] == ["ask_0", "ask_1"]
    names = [c["name"] for c in components(card) if c.get("name")]
    assert len(names) == len(set(names))
    assert {"q0", "c0", "q1", "c1", "q0_1", "c0_1", "q1_1", "c1_1"} <= set(names)
    assert validate_card(card) == []


def test_answered_asks_are_not_rendered_even_if_passed():
    card = progress_cards.render(session(), [ask(0, status="resolved"), ask(1)])
    assert [f["name"] for f in forms_of(card)] == ["ask_1"]


def test_other_input_placeholder_is_zh_hans_by_default():
    card = progress_cards.render(session(), [ask()])
    inputs = [c for c in components(card) if c["tag"] == "input"]
    assert inputs[0]["placeholder"]["content"] == "其他（可选）"


def test_cancel_requested_replaces_the_cancel_button_with_a_note():
    card = progress_cards.render(session(cancel_requested_at=timezone.now()), [])
    values = [b["behaviors"][0].get("value") or {} for b in buttons_outside_forms(card)]
    assert all(v.get("act") != "cancel" for v in values)
    assert "progress_cancel" in [e.get("element_id") for e in card["body"]["elements"]]


def test_details_button_opens_the_details_url_when_given():
    card = progress_cards.render(session(details_url="https://example.com/s/1"), [])
    (details,) = [b for b in buttons_outside_forms(card) if b["name"] == "progress_details"]
    assert details["behaviors"] == [{"type": "open_url", "default_url": "https://example.com/s/1"}]


def test_agent_text_cannot_open_feishu_tags():
    card = progress_cards.render(session(summary="<at id=all></at> hi"), [])
    assert "<at" not in json.dumps(card)


def test_four_questions_with_ten_options_stay_within_feishu_limits():
    many = [
        {
            "question": "Q" * 1000,
            "header": "H" * 40,
            "options": [{"label": f"{i}" * 60, "description": "d" * 500} for i in range(10)],
            "multiSelect": bool(n % 2),
        }
        for n in range(4)
    ]
    card = progress_cards.render(session(), [ask(0, questions=many)])
    assert validate_card(card) == []


def test_many_stacked_large_asks_show_the_oldest_that_fit_and_say_more_wait():
    big = [
        {
            "question": "Q" * 1000,
            "header": "H",
            "options": [{"label": f"opt {i}", "description": "d" * 500} for i in range(10)],
            "multiSelect": False,
        }
    ] * 4
    card = progress_cards.render(session(), [ask(n, questions=big) for n in range(12)])
    assert validate_card(card) == []
    names = [f["name"] for f in forms_of(card)]
    assert names and names == [f"ask_{n}" for n in range(len(names))] and len(names) < 12
    assert "progress_more" in [e.get("element_id") for e in card["body"]["elements"]]
