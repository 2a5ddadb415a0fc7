"""The product's own Kafka-protocol client: metadata, produce and fetch against Kafka listeners."""
