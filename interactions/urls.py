"""URL routes of the interactions app."""

urlpatterns: list = []
