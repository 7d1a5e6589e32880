"""URL routes of the feedback app."""

urlpatterns: list = []
