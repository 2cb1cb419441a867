"""What a held host is worth against a fresh create: a slow host's swap, and a host's price
increase accepted or moved away from."""
