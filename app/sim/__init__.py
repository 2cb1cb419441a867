"""The simulated Vast.ai marketplace: scenario, market model, HTTP API, SSH hosts."""
