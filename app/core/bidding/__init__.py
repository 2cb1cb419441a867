"""The interruptible tier: what to bid, what an outbid means, and whether a rental is the type
and price its create asked for."""
