"""Vast.ai: the REST client behind the Market protocol."""
