"""The cascade: a cheap deployment answers first; its answer is judged by its own token
probabilities (:mod:`~gateway.dispatch.cascade.judged`) and served, or dropped and the
request moved up (:mod:`~gateway.dispatch.cascade.run`)."""
