"""Question panels (`/ws/panel/`, `/panel/`): `service` (the protocol: authentication,
snapshots, answers), `presence` (who is connected, push), `timing` (settings), `consumer`,
`views`, `admin`, `urls`."""
