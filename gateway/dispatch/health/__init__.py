"""What dispatch knows of its deployments: circuit breakers and back-off
(:mod:`~gateway.dispatch.health.breakers`), background probes, live latency figures, the
context lengths learned from rejections, and their sharing between replicas."""
