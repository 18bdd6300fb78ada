"""After the first byte: a stream that stalls (:mod:`~gateway.dispatch.midstream.stall`) or
fails is continued on another candidate (:mod:`~gateway.dispatch.midstream.resume`), the
continuation spliced into what the client already has
(:mod:`~gateway.dispatch.midstream.splice`)."""
