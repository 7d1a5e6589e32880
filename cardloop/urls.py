"""Root URL configuration. Each app contributes its own `urls.py`."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.utils.translation import gettext_lazy as _
from drf_spectacular.views import SpectacularSwaggerView

from cardloop import metrics, views
from plumbing.openapi import EnglishSchemaView

admin.site.site_header = _("Cardloop administration")
admin.site.site_title = _("Cardloop")
admin.site.index_title = _("Feedback policy, bots and delivery")

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("i18n/", include("django.conf.urls.i18n")),
    # Managers (not necessarily staff) sign in here to read the dashboard.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", EnglishSchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("interactions.urls")),
    path("", include("interactions.panels.urls")),
    path("", include("interactions.channels.telegram.urls")),
    path("", include("interactions.signin.urls")),
    path("", include("feedback.urls")),
    path("", include("analytics.urls")),
]

handler404 = "plumbing.api.handler404"
handler500 = "plumbing.api.handler500"
