"""`rentwatch` with a crash injected after N polls, for the exit trap's test (a test fixture:
production code carries no hook for it). Usage: python crash_after_polls.py N rentwatch-args..."""

import sys

from rentwatch.cli.main import main
from rentwatch.engine.supervisor import Supervisor

AFTER = int(sys.argv[1])
_init = Supervisor.__init__


def _init_with_crash(self, *args, **kwargs):
    _init(self, *args, **kwargs)

    def crash():
        if self.polls >= AFTER:
            raise RuntimeError(f"injected failure after {self.polls} polls")

    self.listeners.append(crash)


Supervisor.__init__ = _init_with_crash
sys.exit(main(sys.argv[2:]))
