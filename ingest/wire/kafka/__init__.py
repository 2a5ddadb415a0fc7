"""package: The Kafka protocol's messages, declared (one module per API, as Kafka's message specs), and its headers."""
