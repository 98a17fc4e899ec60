"""The model side: precision policy, gradient accumulation, Keras callbacks, backups."""
