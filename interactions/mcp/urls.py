"""URL routes of the MCP token API (included by `interactions.urls`)."""

from django.urls import path

from interactions.mcp import views

urlpatterns = [
    path(
        "api/v1/sessions/<str:session_id>/mcp-tokens",
        views.McpTokenCreateView.as_view(),
        name="session-mcp-tokens",
    ),
    path(
        "api/v1/mcp-tokens/<str:prefix>/revoke",
        views.McpTokenRevokeView.as_view(),
        name="mcp-token-revoke",
    ),
]
