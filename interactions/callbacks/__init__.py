"""The callback pipeline, from a verified payload to an answer: `registry` (`CardAction`,
`Answer`, `Toast`, handler registration), `inbound` (event dedupe), `dispatcher` (threads,
budget, holds, calling handlers). Transports (e.g. `interactions.channels.feishu.ingress`)
verify requests and hand payloads to the dispatcher."""
