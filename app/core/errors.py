"""Typed errors shared by the core and the shell around it."""

from __future__ import annotations


class RentwatchError(Exception):
    """Base of every error rentwatch raises on purpose; `title` is what a person sees first."""

    title = "rentwatch error"


class MalformedAnswer(RentwatchError):
    """The marketplace (or a host) answered with something that is not what the API promises."""

    title = "malformed answer"


class ConfigError(RentwatchError):
    """A scenario or campaign file that cannot be used as written."""

    title = "bad configuration"
