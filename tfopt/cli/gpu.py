"""GPU commands (monitor, doctor): filled in by the GPU issue."""

COMMANDS: list = []
