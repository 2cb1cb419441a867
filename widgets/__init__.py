"""Textual widgets and screens: they render snapshots and send the operator's intents."""
