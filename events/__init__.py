"""Events out: webhook subscriptions, their outbox of deliveries, and the live stream."""
