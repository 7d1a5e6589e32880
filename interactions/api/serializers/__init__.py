"""Serializers of the bot API, one module per resource (the views are `interactions.api`)."""
