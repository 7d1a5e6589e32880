"""The Feishu channel renders a delivery's feedback area with the feedback app's renderer,
handed over when the app is ready (interactions may not import feedback)."""

from botadmin.policy import default_policy
from feedback import cards
from interactions import channels


def test_the_feishu_channel_renders_the_feedback_area_of_the_feedback_app():
    area = channels.get("feishu").render_feedback_area(default_policy(), "del_1", None)
    assert area == cards.feedback_area(default_policy(), "del_1", None)
    assert "fb_buttons" in area
