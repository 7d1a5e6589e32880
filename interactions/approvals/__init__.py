"""Approvals, quick replies, forms and typed commands: `service` (create, send, answer, the
"always" rules), `handlers` (the `interaction` card-action handler), `textcommands` (typed
`/_interaction <id> <value>` answers)."""
