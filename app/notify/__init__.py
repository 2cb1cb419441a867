"""Reaching the operator who is not watching: notices, their delivery through apprise URLs,
Prometheus metrics and the verification of the market's signed webhooks. Nothing here decides
about a rental; delivery never blocks the engine nor raises into it."""
