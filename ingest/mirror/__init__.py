"""package: The mirror: embedded consumers that copy topics from datacenter clusters into an offline cluster, exactly once."""
