"""The channel registry and interface: every channel kind has an implementation, the Feishu
channel wraps the card renderers and the card queue, the text channels render the fallback and
refuse what they cannot do, and the interactions package has no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from interactions import channels, kinds
from interactions.channels.base import Channel, Unsupported
from interactions.channels.feishu.channel import FeishuChannel
from interactions.channels.text import TextChannel
from interactions.render import interaction_cards
from interactions.tests.ia_helpers import build


def test_every_channel_kind_and_alias_has_a_registered_implementation():
    for kind in kinds.KINDS:
        channel = channels.get(kind)
        assert isinstance(channel, Channel) and channel.name == kind
        assert channel.capabilities == kinds.CAPABILITIES[kind]
    assert isinstance(channels.get("lark"), FeishuChannel)
    assert channels.get("cli").name == kinds.TEXT and channels.get("other").name == kinds.WEBHOOK
    assert channels.get("no-such-channel").name == kinds.WEBHOOK  # nothing interactive


def test_the_feishu_channel_renders_the_interaction_card():
    ia = build(kind="approval", channel="feishu")
    assert channels.get("feishu").render_interaction(ia) == interaction_cards.feishu_card(ia)


@pytest.mark.parametrize("kind", [kinds.WECHAT, kinds.TEXT, kinds.WEBHOOK])
def test_a_text_channel_renders_the_fallback_and_cannot_send_update_or_parse(kind):
    channel = channels.get(kind)
    assert isinstance(channel, TextChannel) and channel.capabilities.text_fallback
    ia = build(kind="approval", channel=kind)
    assert channel.render_interaction(ia) == interaction_cards.fallback_text(ia, kind)
    with pytest.raises(Unsupported):
        channel.send(None, "text", receive_id="oc_x")
    with pytest.raises(Unsupported):
        channel.update(None, "text")
    with pytest.raises(Unsupported):
        channel.parse_callback(None, {})


def test_a_channel_name_must_be_a_canonical_kind():
    with pytest.raises(ValueError):
        TextChannel("cli")
    with pytest.raises(ValueError):
        TextChannel(kinds.FEISHU)


def _imports(root: Path) -> dict[str, set[str]]:
    """module → the interactions modules it imports (top level and inside functions)."""
    modules = {}
    for path in root.rglob("*.py"):
        if {"tests", "migrations"} & set(path.relative_to(root).parts):
            continue
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # a package's own __init__ is not an import of the package's modules
                if target and target != name and not name.startswith(target + "."):
                    found.add(target)
        graph[name] = found
    return graph


def test_interactions_modules_import_each_other_without_cycles():
    graph = _imports(Path(__file__).resolve().parents[1])
    state: dict[str, int] = {}

    def visit(module, path):
        state[module] = 1
        for target in graph[module]:
            if state.get(target) == 1:
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_the_feishu_adapter_is_a_leaf_and_models_import_no_service():
    graph = _imports(Path(__file__).resolve().parents[1])
    for module, targets in graph.items():
        if module.startswith("interactions.lark"):
            assert all(t.startswith("interactions.lark") for t in targets), (module, targets)
    assert graph["interactions.models"] <= {"interactions.panel_timing"}
