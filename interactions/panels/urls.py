"""URL routes of desktop tokens and the web question panel (`interactions.panels.views`);
the WebSocket route `/ws/panel/` is in `interactions.routing`."""

from django.urls import path

from interactions.panels import views as pv

urlpatterns = [
    path("api/v1/desktop-tokens", pv.DesktopTokensView.as_view(), name="desktop-tokens"),
    path(
        "api/v1/desktop-tokens/<int:token_id>/revoke",
        pv.DesktopTokenRevokeView.as_view(),
        name="desktop-token-revoke",
    ),
    path("panel/", pv.panel, name="panel"),
    path("panel/login", pv.panel_login, name="panel-login"),
    path("panel/logout", pv.panel_logout, name="panel-logout"),
]
