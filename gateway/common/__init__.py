"""Small helpers every layer may use: the duration grammar of the config and the CLI, and
a periodic background step. Imports nothing of the project."""
