"""The wire layer: types, declared schemas and their compiled codecs, frames, the connection, error codes."""
