"""The pure core: dataclasses, rules, billing, lifecycle. No I/O, no clock reads."""
