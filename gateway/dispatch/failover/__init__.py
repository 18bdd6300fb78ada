"""Before the first byte: one attempt on one deployment
(:mod:`~gateway.dispatch.failover.attempts`) and the rules that retry it there or move the
request to the next candidate (:mod:`~gateway.dispatch.failover.rules`)."""
