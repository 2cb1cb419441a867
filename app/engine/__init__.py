"""The engine: observe the market, ask the pure rules (core) to decide, execute the decisions."""
