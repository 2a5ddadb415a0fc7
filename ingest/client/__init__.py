"""Clients of the broker: producer, simple consumer, high-level consumer groups."""
