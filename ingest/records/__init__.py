"""Kafka's data formats: record batch v2, legacy message sets, compression, CRC-32C, varints."""
