"""Storage addressed by URI: local filesystem (default) and HDFS over WebHDFS."""
