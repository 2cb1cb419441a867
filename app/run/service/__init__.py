"""The controller as a service: a local HTTP API (Unix socket, optionally TCP with a token) and its
client. `controller.py` is the only module here that touches engine objects."""
