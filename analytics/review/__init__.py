"""Review queues for negative feedback: who may review (`access`), which ratings enter a queue
(`matching`), the state changes (`service`), the reviewer's view of an item (`payloads`), the
API (`api`) and the reviewer's page (`views`)."""
