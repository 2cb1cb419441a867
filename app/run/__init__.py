"""The ways of running the engine: headless, the dashboard's engine thread, the controller process and its service."""
