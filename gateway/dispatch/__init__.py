"""Dispatch: a public model name → a routing decision → attempts on deployments, with
retries, fallback, circuit breakers and the live figures policies rank on.

The face, all the HTTP layer, the client APIs and the CLI use:

* :class:`Work`: one request as the spine hands it down, whole (what routing describes,
  its one description, what each deployment is sent: :mod:`gateway.dispatch.work`);
* :class:`Gateway` holds the live config, its backends and what is known of them; it
  answers a work whole (:meth:`Gateway.answer` → :class:`Routed`) or opens its stream
  (:meth:`Gateway.open` → :class:`ServedStream`: already guarded against stalls,
  resumed on another candidate when it fails mid-way, and billed, with its headers);
* :func:`describe_request`: what routing reads of a request;
* :class:`ReplicaSync`: replicas share breakers, probes, learned limits and figures;
* :class:`Bill`: what a request is settled with.

Behind it, by concern: ``routing/`` (the request path: decide, call, open, hedge),
``failover/`` (before the first byte: attempts, retries, fallback), ``health/`` (the fleet:
breakers and back-off, probes, live figures, learned limits, replica sync), ``midstream/``
(after the first byte: stalls, resume, splice) and ``cascade/``.

Imports admission (per-deployment limits), residency, config, telemetry, backends and
policies; never the client APIs nor the HTTP layer, and calls back into neither.
"""

from gateway.dispatch.cascade.run import Bill, cascade_plan
from gateway.dispatch.health.live import DeploymentTracker
from gateway.dispatch.health.sharing import ReplicaSync
from gateway.dispatch.routing.describing import describe_request
from gateway.dispatch.routing.dispatcher import AdmitDeployment, Gateway, config_version
from gateway.dispatch.routing.served import Routed, ServedStream
from gateway.dispatch.work import Form, HostedLoop, Native, NativeAnswer, Plan, Sending, Work

__all__ = [
    "AdmitDeployment",
    "Bill",
    "DeploymentTracker",
    "Form",
    "Gateway",
    "HostedLoop",
    "Native",
    "NativeAnswer",
    "Plan",
    "ReplicaSync",
    "Routed",
    "Sending",
    "ServedStream",
    "Work",
    "cascade_plan",
    "config_version",
    "describe_request",
]
