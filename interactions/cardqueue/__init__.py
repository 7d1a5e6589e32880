"""Cards Cardloop sends and keeps up to date: `service` (send, register, enqueue updates,
holds until a callback is answered, renderers) and `worker` (applies queued updates)."""
