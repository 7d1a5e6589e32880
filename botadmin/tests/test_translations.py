"""The zh-hans catalogues: every entry compiled and in force. compilemessages skips entries
marked `#, fuzzy` (makemessages' guesses from a similar msgid), so those show in English,
and their guessed msgstr is usually wrong (e.g. "resolved at" guessed as "received at")."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CATALOGUES = sorted(
    p for p in ROOT.glob("**/locale/*/LC_MESSAGES/django.po") if ".venv" not in p.parts
)


@pytest.mark.parametrize("po", CATALOGUES, ids=lambda p: str(p.relative_to(ROOT)))
def test_catalogue_has_no_fuzzy_entries(po):
    entries = po.read_text(encoding="utf-8").split("\n\n")
    fuzzy = [
        entry.split('msgid "', 1)[1].split('"', 1)[0]
        for entry in entries[1:]  # the header may be fuzzy
        if "#, fuzzy" in entry
    ]
    assert fuzzy == []


def test_there_are_catalogues():
    assert len(CATALOGUES) >= 4
