"""The upstream HTTP client remote backends share: a pooled HTTP/1.1 client
(:mod:`~backends.http.h1`), the connection to one upstream under its deadlines
(:mod:`~backends.http.upstream`), and the plumbing around it: settings, SSE frame batches and
upstream failures mapped onto :mod:`gateway.errors` (:mod:`~backends.http.sse`)."""
