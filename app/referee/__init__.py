"""Policies refereed on the simulator, scored from its truth; scenarios fitted to a ledger."""
