"""The group coordinator: consumer groups over the Kafka protocol, their committed offsets in ``__consumer_offsets``."""
