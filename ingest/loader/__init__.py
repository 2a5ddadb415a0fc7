"""The PySpark loader: plan, read, write and atomically commit data plus offsets."""
