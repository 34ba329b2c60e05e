"""The mirror's HTTP/1.1 server, byte ranges and credentials."""
