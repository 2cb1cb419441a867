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


class ConfigErrors(ConfigError):
    """Every problem found in one file, each with its key and why: one fix-and-retry round
    for all of them, not one per problem. Alone, a problem reads as a ConfigError of its own."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = tuple(problems)
        one = len(problems) == 1
        super().__init__(
            problems[0] if one else f"{source}: {len(problems)} problems: " + "; ".join(problems)
        )


def problems_of(exc: ConfigError) -> list[str]:
    return list(exc.problems) if isinstance(exc, ConfigErrors) else [str(exc)]
