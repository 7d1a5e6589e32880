"""URL routes of the analytics app."""

urlpatterns: list = []
