"""Models of the interactions app."""
