"""Telemetry: Prometheus metrics and OpenTelemetry traces per app, and structlog setup.

Imports only the backend contract (for engine figures) and the floor.
"""
