"""deploy/kubernetes, checked without a cluster: every kustomization is rendered here
(tests/deploy/kustomize.py), every manifest is validated against the Kubernetes JSON schemas
that kubernetes-validate ships (strict: unknown fields fail), the CRDs against schemas
written from their documentation, and then the rules that make the gateway safe to run:
probes, shutdown arithmetic, a live-reloadable ConfigMap, selectors, GPU resources."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
from kubernetes_validate.utils import all_versions

from tests.deploy.common import KUBERNETES, parse_shunter, validate_routing
from tests.deploy.kustomize import (
    CLUSTER_SCOPED_KINDS,
    Resource,
    build,
    kustomization_dirs,
    resource_id,
)

BUILDS = ("base", "overlays/cpu", "overlays/gpu")
NAMESPACE = "shunter"
GATEWAY = "shunter-gateway"
SECRET = "shunter-api-keys"
SHUTDOWN_MARGIN_S = 10  # engines release memory and the process exits after the drain
MIN_STARTUP_WINDOW_S = {"cpu": 120, "gpu": 900}  # model load (GPU: download + CUDA graphs)
SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject-keda-v1alpha1.json",
}
# the oldest and newest Kubernetes minor whose schemas kubernetes-validate ships
KUBERNETES_VERSIONS = (all_versions()[0], all_versions()[-1])
_PROMQL_LABEL = re.compile(r'(\w+)="([^"]*)"')


@pytest.fixture(scope="module", autouse=True)
def parse_each_schema_once() -> Iterator[None]:
    """kubernetes-validate re-reads its 1.8 MB definitions file on every call: cache it."""
    with pytest.MonkeyPatch.context() as patch:
        read = cache(kubernetes_validate.utils.schema_contents)
        patch.setattr(kubernetes_validate.utils, "schema_contents", read)
        yield


@cache
def rendered(name: str) -> tuple[Resource, ...]:
    return tuple(build(KUBERNETES / name))


def resources(name: str) -> list[Resource]:
    return copy.deepcopy(list(rendered(name)))


def find(name: str, kind: str, object_name: str) -> Resource:
    matches = [r for r in rendered(name) if r["kind"] == kind]
    found = [r for r in matches if r["metadata"]["name"] == object_name]
    assert len(found) == 1, (
        f"{name}: {kind} {object_name} among {[resource_id(r) for r in matches]}"
    )
    return copy.deepcopy(found[0])


def gateway_pod(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(name, "Deployment", GATEWAY)["spec"]["template"]["spec"]
    return spec


def gateway_container(name: str) -> dict[str, Any]:
    (container,) = gateway_pod(name)["containers"]
    assert container["name"] == "gateway"
    result: dict[str, Any] = container
    return result


def variant(name: str) -> str:
    return "gpu" if "gpu" in name else "cpu"


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.protocols.Validator:
    schema_file = CRD_SCHEMAS.get((api_version, kind))
    assert schema_file, f"no schema for custom resource {api_version} {kind}"
    schema = json.loads((SCHEMAS / schema_file).read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator: jsonschema.protocols.Validator = validator_class(schema)
    return validator


def is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def validate_manifest(resource: Resource) -> None:
    if is_builtin(resource["apiVersion"]):
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(resource, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{resource_id(resource)} (Kubernetes {version}) {path}: {exc.message}")
        return
    errors = list(crd_validator(resource["apiVersion"], resource["kind"]).iter_errors(resource))
    assert not errors, "\n".join(
        f"{resource_id(resource)} {e.json_path}: {e.message}" for e in errors
    )


def test_every_kustomization_is_covered() -> None:
    found = {str(d.relative_to(KUBERNETES)) for d in kustomization_dirs(KUBERNETES)}
    assert found == set(BUILDS)


@pytest.mark.parametrize("name", BUILDS)
def test_manifests_validate_against_the_schemas(name: str) -> None:
    for resource in rendered(name):
        validate_manifest(resource)


def test_the_validator_rejects_a_typo() -> None:
    deployment = find("base", "Deployment", GATEWAY)
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(pytest.fail.Exception, match="terminationGracePeriod"):
        validate_manifest(deployment)
    scaled = find("overlays/cpu", "ScaledObject", GATEWAY)
    scaled["spec"]["triggers"][0]["metadata"]["treshold"] = "4"
    with pytest.raises(AssertionError, match="treshold"):
        validate_manifest(scaled)


@pytest.mark.parametrize("name", BUILDS)
def test_resources_live_in_one_namespace(name: str) -> None:
    for resource in rendered(name):
        if resource["kind"] in CLUSTER_SCOPED_KINDS:
            continue
        assert resource["metadata"].get("namespace") == NAMESPACE, resource_id(resource)
    assert find(name, "Namespace", NAMESPACE)


@pytest.mark.parametrize("name", BUILDS)
def test_probes_and_shutdown_arithmetic(name: str) -> None:
    pod = gateway_pod(name)
    container = gateway_container(name)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = parse_shunter(container["args"])
    assert ports["http"] == args.port and args.host == "0.0.0.0"
    drain_s = args.drain_timeout
    paths = {}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        http = container[probe]["httpGet"]
        assert http["port"] in ports, f"{probe} port {http['port']}"
        paths[probe] = http["path"]
    assert paths == {
        "startupProbe": "/health/readiness",  # started = model loaded and ready
        "readinessProbe": "/health/readiness",  # 503 while starting or draining
        "livenessProbe": "/health/liveness",  # the process only
    }
    startup = container["startupProbe"]
    window = (
        startup.get("initialDelaySeconds", 0)
        + startup["periodSeconds"] * startup["failureThreshold"]
    )
    assert window >= MIN_STARTUP_WINDOW_S[variant(name)], f"startup window {window} s"
    readiness = container["readinessProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] <= 15, "leave fast"
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep", pre_stop
    sleep_s = int(pre_stop[1])
    assert 5 <= sleep_s < drain_s, "long enough for endpoint removal to propagate"
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > sleep_s + drain_s
    assert grace >= sleep_s + drain_s + SHUTDOWN_MARGIN_S


@pytest.mark.parametrize("name", BUILDS)
def test_routing_config_map_is_a_live_directory_mount(name: str) -> None:
    pod = gateway_pod(name)
    container = gateway_container(name)
    config_path = PurePosixPath(parse_shunter(container["args"]).config)
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    # no subPath: the kubelet only updates files of a directory mount
    assert "subPath" not in mount and mount["mountPath"] == str(config_path.parent)
    config_map = find(name, "ConfigMap", volume["configMap"]["name"])
    text = config_map["data"][config_path.name]
    config = validate_routing(text, f"{name}: ConfigMap {config_map['metadata']['name']}")
    assert config.models


@pytest.mark.parametrize("name", ("base", "overlays/cpu"))
def test_cpu_variant_uses_the_cpu_image_and_no_gpu(name: str) -> None:
    container = gateway_container(name)
    assert container["image"].split(":")[0] == "shunter"
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert gateway_pod(name)["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_gpu_variant() -> None:
    pod = gateway_pod("overlays/gpu")
    container = gateway_container("overlays/gpu")
    assert container["image"].split(":")[0] == "shunter-gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["SHUNTER_MODEL_DIR"] == mounts["models"]
    assert env["HF_HOME"].startswith(env["SHUNTER_MODEL_DIR"] + "/")
    # the model cache is the PVC, and only the PVC (the base's emptyDir was removed)
    assert set(volumes["models"]) == {"name", "persistentVolumeClaim"}
    claim = find(
        "overlays/gpu",
        "PersistentVolumeClaim",
        volumes["models"]["persistentVolumeClaim"]["claimName"],
    )
    assert claim["spec"]["resources"]["requests"]["storage"]
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory" and mounts["dshm"] == "/dev/shm"
    routing = find("overlays/gpu", "ConfigMap", "shunter-config")["data"]["shunter.yaml"]
    assert "backend: vllm" in routing
    strategy = find("overlays/gpu", "Deployment", GATEWAY)["spec"]["strategy"]
    assert strategy["rollingUpdate"]["maxSurge"] == 0, "no spare GPU for a surge pod"


@pytest.mark.parametrize("name", BUILDS)
def test_redis_persists_to_an_append_only_file_on_a_claim(name: str) -> None:
    redis = find(name, "Deployment", "shunter-redis")["spec"]["template"]["spec"]
    (container,) = redis["containers"]
    args = " ".join(container["args"])
    assert "--appendonly yes" in args and "--appendfsync everysec" in args
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in redis["volumes"]}
    (data,) = (volume for volume, path in mounts.items() if path == "/data")
    assert set(volumes[data]) == {"name", "persistentVolumeClaim"}  # not an emptyDir
    claim = find(name, "PersistentVolumeClaim", volumes[data]["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]


@pytest.mark.parametrize("name", BUILDS)
def test_api_keys_come_from_a_secret(name: str) -> None:
    container = gateway_container(name)
    # required: without a master key the gateway runs in open mode, on loopback only
    assert {"secretRef": {"name": SECRET}} in container["envFrom"]
    for var in container["env"]:
        if re.search(r"KEY|TOKEN|PASSWORD", var["name"]):
            assert "value" not in var, f"{var['name']} must come from a Secret"
    kinds = {r["kind"] for r in rendered(name)}
    assert "Secret" not in kinds, "secrets are created on the cluster, never committed"


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("name", BUILDS)
def test_selectors_and_references_resolve(name: str) -> None:
    deployments = [r for r in rendered(name) if r["kind"] == "Deployment"]
    for service in (r for r in rendered(name) if r["kind"] == "Service"):
        selector = service["spec"]["selector"]
        (target,) = [
            d
            for d in deployments
            if _labels_match(selector, d["spec"]["template"]["metadata"]["labels"])
        ]
        assert _labels_match(
            target["spec"]["selector"]["matchLabels"],
            target["spec"]["template"]["metadata"]["labels"],
        )
        port_names = {
            p["name"] for c in target["spec"]["template"]["spec"]["containers"] for p in c["ports"]
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{resource_id(service)} {port}"
    budget = find(name, "PodDisruptionBudget", GATEWAY)
    assert budget["spec"]["selector"] == find(name, "Deployment", GATEWAY)["spec"]["selector"]
    assert "minAvailable" not in budget["spec"], "minAvailable blocks drains at one replica"
    env = {e["name"]: e.get("value") for e in gateway_container(name)["env"]}
    redis_url = urlsplit(env["SHUNTER_REDIS_URL"])
    redis = find(name, "Service", str(redis_url.hostname))
    assert redis_url.port in {p["port"] for p in redis["spec"]["ports"]}


@pytest.mark.parametrize("name", ("overlays/cpu", "overlays/gpu"))
def test_service_monitor_scrapes_the_gateway(name: str) -> None:
    monitor = find(name, "ServiceMonitor", GATEWAY)
    service = find(name, "Service", GATEWAY)
    assert _labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


@pytest.mark.parametrize("name", ("overlays/cpu", "overlays/gpu"))
def test_autoscaling_on_queue_depth(name: str) -> None:
    scaled = find(name, "ScaledObject", GATEWAY)
    spec = scaled["spec"]
    target = spec["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", GATEWAY)
    assert find(name, "Deployment", target["name"])
    assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    query = trigger["metadata"]["query"]
    assert query.startswith("sum(shunter_queue_depth{")
    # the labels Prometheus attaches to what the ServiceMonitor scrapes
    labels = dict(_PROMQL_LABEL.findall(query))
    assert labels == {"namespace": scaled["metadata"]["namespace"], "service": GATEWAY}
    if variant(name) == "gpu":
        assert float(trigger["metadata"]["threshold"]) > 4


@pytest.mark.parametrize("name", ("overlays/cpu", "overlays/gpu"))
def test_the_hpa_keda_creates_is_valid(name: str) -> None:
    """KEDA turns the ScaledObject into an autoscaling/v2 HPA; build the same HPA and validate
    it, so the behavior block is checked against the real Kubernetes schema."""
    spec = find(name, "ScaledObject", GATEWAY)["spec"]
    trigger = spec["triggers"][0]
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"keda-hpa-{GATEWAY}", "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": spec["scaleTargetRef"],
            "minReplicas": spec["minReplicaCount"],
            "maxReplicas": spec["maxReplicaCount"],
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": f"s0-prometheus-{trigger['name']}"},
                        "target": {
                            "type": "AverageValue",
                            "averageValue": trigger["metadata"]["threshold"],
                        },
                    },
                }
            ],
            "behavior": spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
        },
    }
    validate_manifest(hpa)
