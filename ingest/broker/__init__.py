"""The broker: the log storage engine, the wire protocol and the socket server."""
