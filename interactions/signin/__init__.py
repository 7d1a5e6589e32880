"""Sign in with Feishu (OAuth 2 web login of the sign-in bot's app): `service` (the state of a
sign-in in progress, what a verified account becomes), `views`, `urls`."""
