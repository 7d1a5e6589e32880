"""OpenAPI (drf-spectacular) description of Cardloop's authentication schemes."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BotApiKeyScheme(OpenApiAuthenticationExtension):
    """`Authorization: Bearer clk_…` — a bot API key (`botadmin.auth.BotApiKeyAuthentication`)."""

    target_class = "botadmin.auth.BotApiKeyAuthentication"
    name = "botApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "clk_<lookup>_<secret>",
            "description": "Bot API key created in the admin (shown once).",
        }


class ManagerTokenScheme(OpenApiAuthenticationExtension):
    """`Authorization: Token cmk_…` — a manager API token
    (`botadmin.auth.ManagerTokenAuthentication`)."""

    target_class = "botadmin.auth.ManagerTokenAuthentication"
    name = "managerToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token cmk_<lookup>_<secret>`: a manager API token issued in the "
            "admin (shown once, stored hashed). Acts as its user.",
        }
