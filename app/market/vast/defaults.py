"""Where the Vast.ai API answers unless told otherwise, and how long one call may take: read
by the CLI's flags, so kept apart from the client (no HTTP library loaded to build a parser)."""

REAL_MARKET = "https://console.vast.ai"  # the API's base, as the official CLI's default
DEFAULT_TIMEOUT = 20.0  # seconds for one call, whole answer included (`--http-timeout` overrides)
