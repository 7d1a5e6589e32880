"""Alerts on quality drops: measuring and deciding (`rules`), the Feishu card (`cards`), the
state changes (`service`) and the history page (`views`)."""
