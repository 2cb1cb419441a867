"""The marketplace protocol the engine speaks, with its own errors and result types; one folder per marketplace."""
