"""The request path: a public model name → the policy's decision
(:mod:`~gateway.dispatch.routing.describing` describes the deployments to it) → a whole
answer (``call``) or a stream opened on its first frame (``open_stream``), hedged where the
route says so."""
