"""URL routes of the interactions app."""

from django.urls import include, path

from interactions.api import asks as av
from interactions.api import capabilities as caps
from interactions.api import interactions as iv
from interactions.api import textcommands as tc
from interactions.channels.feishu import ingress
from interactions.channels.slack import ingress as slack

urlpatterns = [
    path("lark/<str:app_id>/callback", ingress.callback, name="lark-callback"),
    path("slack/<str:app_id>/interactivity", slack.interactivity, name="slack-interactivity"),
    path("slack/<str:app_id>/events", slack.events, name="slack-events"),
    # Interactions across channels: approvals, quick replies, forms, typed commands
    path("api/v1/interactions", iv.InteractionCreateView.as_view(), name="interactions"),
    path(
        "api/v1/interactions/text-command",
        tc.TextCommandView.as_view(),
        name="interaction-text-command",
    ),
    path(
        "api/v1/interactions/<str:public_id>",
        iv.InteractionDetailView.as_view(),
        name="interaction-detail",
    ),
    path(
        "api/v1/interactions/<str:public_id>/cancel",
        iv.InteractionCancelView.as_view(),
        name="interaction-cancel",
    ),
    path(
        "api/v1/interactions/<str:public_id>/resolve",
        iv.InteractionResolveView.as_view(),
        name="interaction-resolve",
    ),
    path("api/v1/approvals/check", iv.ApprovalCheckView.as_view(), name="approval-check"),
    path("api/v1/capabilities", caps.CapabilitiesView.as_view(), name="capabilities"),
    # Progress cards and asks
    path(
        "api/v1/sessions/<str:session_id>/progress",
        av.ProgressView.as_view(),
        name="session-progress",
    ),
    path("api/v1/sessions/<str:session_id>/asks", av.AskCreateView.as_view(), name="session-asks"),
    path(
        "api/v1/sessions/<str:session_id>/asks/cancel",
        av.SessionAsksCancelView.as_view(),
        name="session-asks-cancel",
    ),
    path("api/v1/asks/<str:request_id>", av.AskDetailView.as_view(), name="ask-detail"),
    path("api/v1/asks/<str:request_id>/cancel", av.AskCancelView.as_view(), name="ask-cancel"),
    # The MCP tool server's session tokens (the server itself is mounted in cardloop.asgi)
    path("", include("interactions.mcp.urls")),
]
