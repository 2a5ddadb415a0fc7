"""ingest: batch ingestion of log data in the design of LinkedIn's original Kafka pipeline."""

__version__ = "0.1.0"
