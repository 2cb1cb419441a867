"""Typed errors shared by the core and the shell around it."""

from __future__ import annotations


class RentwatchError(Exception):
    """Base of every error rentwatch raises on purpose; `title` is what a person sees first."""

    title = "error"  # printed as "rentwatch: error: ...": the prefix names the tool once


class MalformedAnswer(RentwatchError):
    """The marketplace (or a host) answered with something that is not what the API promises."""

    title = "malformed answer"


class BadRow(MalformedAnswer):
    """The market answered for an instance with a row that cannot be believed (a number not
    finite, out of range): the instance exists, its row this time is not evidence."""

    def __init__(self, instance_id: int, problem: str) -> None:
        super().__init__(f"row of {instance_id}: {problem}")
        self.instance_id = instance_id
        self.problem = problem


class ConfigError(RentwatchError):
    """A scenario or campaign file that cannot be used as written."""

    title = "bad configuration"
