"""The in-memory market (`market.py`): the engine's unit tests run on it."""
