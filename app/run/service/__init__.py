"""The controller as a service: a local HTTP API (Unix socket, optionally TCP with a token) that
`rentwatch run --headless` serves, and the client that `attach`, `ls`, `ledger` and `receipt`
use to reach it. `controller.py` is the only module here that touches engine objects."""
