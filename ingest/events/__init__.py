"""What services publish: the event envelope, Avro schema registry, monitoring events, load generator."""
