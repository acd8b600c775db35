"""reward."""
