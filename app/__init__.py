"""rentwatch: supervise GPU instances rented on consumer marketplaces."""

__version__ = "0.1.0"
