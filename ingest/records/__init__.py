"""Data formats: Kafka's record batch v2 and legacy message sets, the 0.7 message sets, compression, CRCs, varints."""
