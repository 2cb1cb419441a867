"""Reaching the operator who is not watching: notices (pure, `events`), their delivery through
apprise URLs (`notifier`), Prometheus metrics (`metrics`) and the verification of the market's
own signed webhooks (`webhooks`).

Nothing here decides anything about a rental: the engine tells these modules what happened, and
they tell a person (or a scraper). Delivery never blocks the engine and never raises into it.
"""
