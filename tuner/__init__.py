"""tuner."""
