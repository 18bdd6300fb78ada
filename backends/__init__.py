"""Backends: one module per engine or wire API, behind the contract in ``backends.base``."""
