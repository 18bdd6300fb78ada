"""docker-compose.yml, checked without Docker: the Compose Specification's JSON schema, then
the stack's own rules (healthchecks, start order, the GPU profile, files, ports, env)."""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest

from tests.deploy.common import DEPLOY, ROOT, load_yaml, parse_shunter, validate_routing_file

COMPOSE_FILE = ROOT / "docker-compose.yml"
SERVICES = {
    "gateway",
    "redis",
    "llamacpp-worker",
    "otel-collector",
    "prometheus",
    "grafana",
    "gateway-gpu",
}
GATEWAYS = ("gateway", "gateway-gpu")
# the standard OpenTelemetry SDK variables for OTLP export; nothing else named OTEL_*
OTEL_EXPORT_VARIABLES = {
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
}
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")
_PORT_FLAG = re.compile(r"--port[= ](\d+)")
_DURATION = re.compile(r"(\d+)(h|m|s|ms|us)")
_SHELL_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE_FILE)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def interpolate(value: str) -> str:
    """Compose's variable interpolation with an empty environment: defaults apply."""
    text = _INTERPOLATION.sub(lambda m: m.group(2) or "", value.replace("$$", "\0"))
    return text.replace("\0", "$")


def command_text(service: dict[str, Any]) -> str:
    command = service.get("command", [])
    return interpolate(" ".join(command) if isinstance(command, list) else command)


def listen_port(service: dict[str, Any]) -> int:
    match = _PORT_FLAG.search(command_text(service))
    assert match, "no --port in the command"
    return int(match.group(1))


def shunter_invocations(service: dict[str, Any]) -> list[list[str]]:
    """The argument lists of every ``shunter`` the service's command runs, with shell
    variables expanded from the service's environment and the script's own assignments."""
    command = service["command"]
    if service.get("entrypoint") is None:  # the image's ENTRYPOINT is shunter
        return [[interpolate(a) for a in command]]
    variables = {k: interpolate(str(v)) for k, v in service.get("environment", {}).items()}
    script = interpolate(" ".join(command) if isinstance(command, list) else command)
    runs = []
    for part in re.split(r";|\|\||&&", script):
        expanded = _SHELL_VARIABLE.sub(lambda m: variables[m.group(1) or m.group(2)], part)
        words = shlex.split(expanded)
        if len(words) == 1 and re.fullmatch(r"\w+=.*", words[0]):
            name, _, value = words[0].partition("=")
            variables[name] = value
        elif "shunter" in words:
            runs.append(words[words.index("shunter") + 1 :])
    return runs


def healthcheck_text(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    return " ".join(test) if isinstance(test, list) else str(test)


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts (short syntax)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            mounts[target] = (ROOT / source).resolve()
    return mounts


def seconds(duration: str) -> float:
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    return sum(int(n) * scale[unit] for n, unit in _DURATION.findall(duration))


def collector_config() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(DEPLOY / "otel" / "collector.yaml")
    return data


def endpoint_port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendored.joinpath("compose-spec.json").read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    errors = sorted(validator_class(schema).iter_errors(compose), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors)


def test_the_stack_has_its_services(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == SERVICES


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_service_has_a_healthcheck(services: dict[str, dict[str, Any]], name: str) -> None:
    check = services[name].get("healthcheck")
    assert check and not check.get("disable"), f"{name} has no healthcheck"
    test = check["test"]
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL") and len(test) > 1
    for key in ("interval", "timeout", "retries", "start_period"):
        assert key in check, f"{name}: healthcheck.{key}"
    assert seconds(check["timeout"]) < seconds(check["interval"])


def test_depends_on_waits_for_healthy_services(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs the long form"
        for target, rule in depends.items():
            assert target in services, f"{name} depends on unknown {target}"
            assert rule == {"condition": "service_healthy"}, f"{name} -> {target}: {rule}"
            assert "healthcheck" in services[target]
            # a default-profile service must not wait for one that only runs with a profile
            assert not services[target].get("profiles") or service.get("profiles")
    for gateway in GATEWAYS:
        assert {"redis", "otel-collector"} <= set(services[gateway]["depends_on"])
    assert "llamacpp-worker" in services["gateway"]["depends_on"]
    assert "prometheus" in services["grafana"]["depends_on"]


def test_redis_persists_to_an_append_only_file_on_a_volume(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    redis = services["redis"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    volume, _, target = redis["volumes"][0].partition(":")
    assert target == "/data" and volume in compose["volumes"]  # a named volume, kept


def test_gpu_profile_reserves_an_nvidia_gpu(services: dict[str, dict[str, Any]]) -> None:
    gpu = services["gateway-gpu"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert gpu["build"]["dockerfile"] == "Dockerfile.gpu"
    assert "shm_size" in gpu or gpu.get("ipc") == "host", "vLLM needs shared memory"
    for name, service in services.items():
        if name != "gateway-gpu":
            assert "profiles" not in service, f"{name} would not start by default"
            assert "deploy" not in service, f"{name} reserves devices"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_referenced_files_exist(services: dict[str, dict[str, Any]], name: str) -> None:
    service = services[name]
    for target, source in bind_mounts(service).items():
        assert source.exists(), f"{name}: {source} (mounted at {target}) is missing"
        assert ROOT in source.parents, f"{name}: {source} is outside the repository"
    build = service.get("build")
    if build is not None:
        context = ROOT / build["context"]
        assert context.is_dir(), f"{name}: build context {context}"
        assert (context / build.get("dockerfile", "Dockerfile")).is_file()


@pytest.mark.parametrize("name", GATEWAYS)
def test_routing_config_is_a_mounted_directory_and_valid(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    service = services[name]
    command = service["command"]
    config_path = PurePosixPath(command[command.index("--config") + 1])
    mounts = bind_mounts(service)
    # the directory is mounted, not the file: a file mount would miss saves-by-rename
    source = mounts.get(str(config_path.parent))
    assert source is not None and source.is_dir(), f"{name}: mount {config_path.parent}"
    assert any(v.endswith(":ro") for v in service["volumes"] if str(config_path.parent) in v)
    if name == "gateway":
        assert source == DEPLOY / "config"
    validate_routing_file(source / config_path.name)


@pytest.mark.parametrize(("name", "port"), [("gateway", 8000), ("llamacpp-worker", 8080)])
def test_ports_agree_with_commands(
    services: dict[str, dict[str, Any]], name: str, port: int
) -> None:
    service = services[name]
    assert listen_port(service) == port
    assert f"127.0.0.1:{port}/" in healthcheck_text(service)
    for published in service.get("ports", []):
        assert published.startswith("127.0.0.1:"), "published on loopback only"
        assert int(published.rsplit(":", 1)[1]) == port


def test_gpu_gateway_listens_where_it_is_checked(services: dict[str, dict[str, Any]]) -> None:
    gpu = services["gateway-gpu"]
    port = listen_port(gpu)
    assert f"127.0.0.1:{port}/health/readiness" in healthcheck_text(gpu)
    assert [int(p.rsplit(":", 1)[1]) for p in gpu["ports"]] == [port]
    published = {p.rsplit(":", 1)[0] for s in services.values() for p in s.get("ports", [])}
    assert len(published) == sum(len(s.get("ports", [])) for s in services.values())


def test_gateway_reaches_the_worker_it_routes_to(services: dict[str, dict[str, Any]]) -> None:
    generate, worker = (parse_shunter(a) for a in shunter_invocations(services["llamacpp-worker"]))
    # the demo model is written where the worker loads it, inside the named volume
    assert generate.out == worker.model
    volumes = dict(v.split(":")[::-1] for v in services["llamacpp-worker"]["volumes"])
    assert volumes[str(worker.model.parent)] == "worker-models"
    for directory in ("config", "config-gpu"):
        routing = load_yaml(DEPLOY / directory / "shunter.yaml")
        for deployment in routing["deployments"]:
            if "base_url" not in deployment:
                continue
            url = urlsplit(deployment["base_url"])
            assert url.hostname in services, f"{directory}: {url.hostname} is no service"
            assert url.port == listen_port(services[url.hostname])
            if url.hostname == "llamacpp-worker":
                assert url.path == "/v1" and deployment["model"] == worker.name


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_otel_variables_only_configure_otlp_export(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    environment = services[name].get("environment", {})
    assert isinstance(environment, dict)
    otel = {k: interpolate(str(v)) for k, v in environment.items() if k.startswith("OTEL_")}
    assert set(otel) <= OTEL_EXPORT_VARIABLES
    if name not in GATEWAYS:
        assert not otel
        return
    receivers = collector_config()["receivers"]["otlp"]["protocols"]
    protocol = {"http/protobuf": "http", "grpc": "grpc"}[otel["OTEL_EXPORTER_OTLP_PROTOCOL"]]
    url = urlsplit(otel["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert url.hostname == "otel-collector"
    assert url.port == endpoint_port(receivers[protocol]["endpoint"])
    # the gateway exports traces with the OTLP/HTTP exporter; metrics go through /metrics
    assert protocol == "http" and otel["OTEL_TRACES_EXPORTER"] == "otlp"
    assert otel["OTEL_METRICS_EXPORTER"] == "none"


@pytest.mark.parametrize("name", [*GATEWAYS, "llamacpp-worker"])
def test_shunter_commands_parse_and_stop_after_the_drain(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    runs = [parse_shunter(args) for args in shunter_invocations(services[name])]
    server = runs[-1]  # demo-model (worker) runs first, then the long-running server
    assert server.host == "0.0.0.0" and server.port == listen_port(services[name])
    assert seconds(services[name]["stop_grace_period"]) > server.drain_timeout


def test_collector_config_and_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    service = services["otel-collector"]
    config_arg = next(a for a in service["command"] if a.startswith("--config="))
    assert bind_mounts(service)[config_arg.split("=", 1)[1]] == DEPLOY / "otel" / "collector.yaml"
    config = collector_config()
    pipelines = config["service"]["pipelines"]
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(config.get(kind, {})), pipeline
    assert config["service"]["extensions"] == ["health_check"]
    health = endpoint_port(config["extensions"]["health_check"]["endpoint"])
    assert f"127.0.0.1:{health}/" in healthcheck_text(service)
    assert healthcheck_text(service).startswith("CMD /busybox wget")


def _prometheus_targets() -> dict[str, list[str]]:
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    return {
        job["job_name"]: [t for group in job["static_configs"] for t in group["targets"]]
        for job in config["scrape_configs"]
    }


def test_prometheus_scrapes_the_gateway_and_the_collector(
    services: dict[str, dict[str, Any]],
) -> None:
    service = services["prometheus"]
    config_arg = next(a for a in service["command"] if a.startswith("--config.file="))
    config_file = PurePosixPath(config_arg.split("=", 1)[1])
    assert (bind_mounts(service)[str(config_file.parent)] / config_file.name).is_file()
    targets = _prometheus_targets()
    assert sorted(targets["shunter"]) == sorted(
        f"{gateway}:{listen_port(services[gateway])}" for gateway in GATEWAYS
    )
    config = collector_config()
    collector_ports = {
        endpoint_port(config["exporters"]["prometheus"]["endpoint"]),
        config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"][
            "port"
        ],
    }
    collector_targets = targets["otel-collector"] + targets["otel-collector-internal"]
    assert {endpoint_port(t) for t in collector_targets} == collector_ports
    assert {t.split(":")[0] for t in collector_targets} == {"otel-collector"}


def test_grafana_is_provisioned(services: dict[str, dict[str, Any]]) -> None:
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == DEPLOY / "grafana" / "provisioning"
    datasources = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (datasource,) = datasources["datasources"]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus"
    assert f"127.0.0.1:{url.port}/" in healthcheck_text(services["prometheus"])
    providers = load_yaml(DEPLOY / "grafana/provisioning/dashboards/shunter.yaml")
    (provider,) = providers["providers"]
    dashboards_dir = mounts[provider["options"]["path"]]
    assert dashboards_dir == DEPLOY / "grafana" / "dashboards"
    home = PurePosixPath(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert (mounts[str(home.parent)] / home.name).is_file()
    for path in dashboards_dir.glob("*.json"):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
        assert uids == {datasource["uid"]}, path.name
