"""URL routes of sign-in with Feishu (`interactions.signin.views`)."""

from django.urls import path

from interactions.signin import views

urlpatterns = [
    path("auth/feishu/login", views.start, name="feishu-signin"),
    path("auth/feishu/callback", views.callback, name="feishu-signin-callback"),
]
