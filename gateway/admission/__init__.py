"""Admission: who may send a request and how much: virtual keys, rate limits (RPM, TPM),
money budgets, and the exact response cache.

Imports the config, the state store and the floor; never dispatch or the HTTP layer.
"""
