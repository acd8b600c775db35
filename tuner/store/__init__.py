"""Persistence of trials: the `tuner.trial/v1` history store and its import/export (`history`)."""
