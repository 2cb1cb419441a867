"""Read models for the widgets: immutable snapshots of the fleet and of one instance."""
