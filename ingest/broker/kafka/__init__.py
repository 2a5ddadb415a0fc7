"""The broker's Kafka listener: Kafka's request header, the APIs and versions it serves, over Kafka-format topics."""
