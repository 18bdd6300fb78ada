"""Dispatch: a public model name → a routing decision → attempts on deployments, with
retries, fallback, circuit breakers and the live figures policies rank on.

Imports admission (per-deployment limits), residency, config, telemetry, backends and
policies; never the HTTP layer.
"""
