"""deploy/k8s and deploy/swarm, checked offline (no cluster here): structure, wiring, images.

Every Kubernetes manifest is loaded with PyYAML and checked for what a cluster would only show
at run time: selectors that match their pods, Service ports that reach a container port,
probes on ``/health`` at the port the container listens on, resources on every container, the
worker's ``--controller`` URL at the controller Service's name and port, its ``--self`` address
from the pod IP (downward API), and images that ``agentrl-envs build`` makes. With the optional
``kubernetes-validate`` package installed (22 MB of schemas, so not a test dependency) each
resource is also validated against the Kubernetes API schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agentrl_envs.containers.engine import BASE_REPO, CONTROLLER_REPO, worker_repo

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
STACK = ROOT / "deploy" / "swarm" / "stack.yml"
TASKS = ("echo", "db", "os")
#: Tasks built into agentrl-envs have no image of their own: the controller image serves them.
BUILT_IN = {"echo"}
#: Kubernetes versions the manifests are validated against (native sidecars: 1.29 and later).
K8S_VERSIONS = ("1.29.0", "1.37.0")


def load_k8s() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return kustomization, docs


KUSTOMIZATION, RESOURCES = load_k8s()
DEPLOYMENTS = {d["metadata"]["name"]: d for d in RESOURCES if d["kind"] == "Deployment"}
SERVICES = {d["metadata"]["name"]: d for d in RESOURCES if d["kind"] == "Service"}
CONTROLLER_SERVICE = "agentrl-controller"


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def all_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return pod(deployment).get("initContainers", []) + pod(deployment)["containers"]


def flags(args: list[str]) -> dict[str, str]:
    """``--name=value`` and ``--name value`` arguments as a dict."""
    out, i = {}, 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            name, value = arg[2:], args[i + 1]
            i += 1
        else:
            name, value = arg.lstrip("-"), ""
        out[name] = value
        i += 1
    return out


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


_UNITS = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q: str | int | float) -> float:
    """A Kubernetes resource quantity (``500m``, ``2``, ``512Mi``) as a number."""
    m = re.fullmatch(r"([0-9.]+)(m|k|M|G|Ki|Mi|Gi|Ti)?", str(q))
    assert m, f"not a resource quantity: {q!r}"
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def dockerfile_port(task: str) -> int:
    """The ``PORT`` a task's worker image listens on by default (its Dockerfile's ``ENV``)."""
    text = (ROOT / "envs" / task / "Dockerfile").read_text()
    return int(re.search(r"^ENV .*\bPORT=(\d+)", text, re.M).group(1))


# ---------------------------------------------------------------------------- kustomization


def test_kustomization_lists_every_manifest_and_the_namespace_it_creates():
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(KUSTOMIZATION["resources"]) == sorted(manifests)
    (namespace,) = [d for d in RESOURCES if d["kind"] == "Namespace"]
    assert KUSTOMIZATION["namespace"] == namespace["metadata"]["name"]
    assert {d["kind"] for d in RESOURCES} == {"Namespace", "Deployment", "Service"}


def test_one_deployment_per_task_and_images_that_build_makes():
    assert set(DEPLOYMENTS) == {"agentrl-controller", *(f"agentrl-worker-{t}" for t in TASKS)}
    ours = {BASE_REPO, CONTROLLER_REPO, *(worker_repo(t) for t in TASKS if t not in BUILT_IN)}
    used = set()
    for name, dep in DEPLOYMENTS.items():
        for c in all_containers(dep):
            repo, _, tag = c["image"].rpartition(":")
            if c["name"] == "dind":
                assert repo == "docker" and tag.endswith("-dind"), c["image"]
                continue
            assert repo in ours and tag == "latest", f"{name}/{c['name']}: {c['image']} is not an `agentrl-envs build` image"
            used.add(repo)
    assert used == ours
    # kustomize's images: transformer retargets them all (registry, pinned tag) in one place.
    assert {i["name"] for i in KUSTOMIZATION["images"]} == ours


# ---------------------------------------------------------------------------- deployments


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_deployment_selects_its_pods_and_probes_health_on_the_container_port(name):
    dep = DEPLOYMENTS[name]
    selector = dep["spec"]["selector"]["matchLabels"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector and selector.items() <= labels.items(), f"{name}: selector {selector} does not match {labels}"
    others = [d for n, d in DEPLOYMENTS.items() if n != name]
    assert not any(selector.items() <= d["spec"]["template"]["metadata"]["labels"].items() for d in others)
    (app,) = pod(dep)["containers"]
    (port,) = app["ports"]
    for probe in ("readinessProbe", "livenessProbe"):
        get = app[probe]["httpGet"]
        assert get["path"] == "/health", (name, probe)
        assert get["port"] in (port["containerPort"], port["name"]), (name, probe, get, port)
    # The image's entrypoint listens on $PORT; a command of our own names the port itself.
    listens = env_of(app).get("PORT") or flags(app.get("command", []) + app.get("args", [])).get("port")
    assert int(listens) == port["containerPort"], (name, listens)
    assert pod(dep).get("automountServiceAccountToken") is False, "nothing here talks to the Kubernetes API"


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_every_container_has_requests_within_limits(name):
    for c in all_containers(DEPLOYMENTS[name]):
        res = c["resources"]
        for kind in ("cpu", "memory"):
            assert quantity(res["requests"][kind]) <= quantity(res["limits"][kind]), (name, c["name"], kind)


def test_controller_is_a_single_replica_recreated_never_doubled():
    dep = DEPLOYMENTS["agentrl-controller"]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"


def test_service_reaches_the_controller_port():
    assert set(SERVICES) == {CONTROLLER_SERVICE}
    svc = SERVICES[CONTROLLER_SERVICE]
    targets = [
        d for d in DEPLOYMENTS.values() if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert [d["metadata"]["name"] for d in targets] == ["agentrl-controller"]
    (app,) = pod(targets[0])["containers"]
    (cport,) = app["ports"]
    (sport,) = svc["spec"]["ports"]
    assert sport["targetPort"] in (cport["name"], cport["containerPort"])
    assert sport["port"] == cport["containerPort"] == 5020


# ---------------------------------------------------------------------------- workers


@pytest.mark.parametrize("task", TASKS)
def test_worker_registers_with_the_controller_service_from_its_pod_ip(task):
    dep = DEPLOYMENTS[f"agentrl-worker-{task}"]
    (app,) = pod(dep)["containers"]
    args = flags(app["args"])
    controller = urlsplit(args["controller"])
    (sport,) = SERVICES[CONTROLLER_SERVICE]["spec"]["ports"]
    assert (controller.hostname, controller.port, controller.path) == (CONTROLLER_SERVICE, sport["port"], "/api")
    assert env_of(app)["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    port = app["ports"][0]["containerPort"]
    # Kubernetes expands $(POD_IP) in args from the container's env.
    assert args["self"] == f"http://$(POD_IP):{port}/api"
    if task in BUILT_IN:
        assert app["image"].startswith(f"{CONTROLLER_REPO}:")
        assert app["command"] == ["agentrl-envs", "worker", task]
    else:
        assert app["image"].startswith(f"{worker_repo(task)}:") and "command" not in app, "the image's entrypoint runs the task"
        assert port == dockerfile_port(task)


def test_os_worker_gets_its_own_engine_from_a_privileged_sidecar_only():
    dep = DEPLOYMENTS["agentrl-worker-os"]
    spec = pod(dep)
    init = {c["name"]: c for c in spec["initContainers"]}
    (worker,) = spec["containers"]
    assert [c["name"] for c in spec["initContainers"]] == ["sandbox-image", "dind"], "the image tarball before the engine"
    dind = init["dind"]
    assert dind["restartPolicy"] == "Always", "a native sidecar: started (startupProbe passed) before the worker"
    assert dind["securityContext"]["privileged"] is True
    assert "agentrl/base:latest" in dind["startupProbe"]["exec"]["command"], "the worker starts once its session image is there"
    assert not worker.get("securityContext", {}).get("privileged"), "the worker itself is unprivileged"
    assert init["sandbox-image"]["image"] == f"{BASE_REPO}:latest"
    # The worker talks to the sidecar's engine over a unix socket on a pod-local volume.
    host = env_of(worker)["DOCKER_HOST"]
    assert host == env_of(dind)["DOCKER_HOST"] and host.startswith("unix://")
    sock_dir = str(Path(host.removeprefix("unix://")).parent)
    mounts = {c["name"]: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for c in (worker, dind)}
    assert mounts["worker"][sock_dir] == mounts["dind"][sock_dir]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert all("emptyDir" in v for v in volumes.values()), "nothing of the node is mounted (no hostPath)"
    assert "tcp://" not in dind["command"][-1], "the engine listens on no TCP port"
    assert env_of(worker)["AGENTRL_OS_BACKEND"] == "docker"


# ---------------------------------------------------------------------------- schema


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_resources_validate_against_the_kubernetes_schema(version):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (22 MB) for the schema check")
    for resource in RESOURCES:
        kv.validate(resource, version, strict=True)  # raises ValidationError naming the field


def test_the_schema_check_catches_a_wrong_field():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (22 MB) for the schema check")
    dep = yaml.safe_load(yaml.safe_dump(DEPLOYMENTS["agentrl-worker-db"]))
    pod(dep)["containers"][0]["readinessProbe"]["httpGet"]["pth"] = "/health"
    with pytest.raises(kv.ValidationError):
        kv.validate(dep, K8S_VERSIONS[0], strict=True)


# ---------------------------------------------------------------------------- swarm stack


def test_swarm_stack_wiring():
    """deploy/swarm/stack.yml: what tests/containers/test_swarm.py deploys, checked without an engine."""
    stack = yaml.safe_load(STACK.read_text())
    services = stack["services"]
    assert set(services) == {"controller", *(f"worker-{t}" for t in TASKS)}
    default = re.compile(r"\$\{AGENTRL_\w+_IMAGE:-([^}]+)\}")
    controller = services["controller"]
    assert default.fullmatch(controller["image"]).group(1) == f"{CONTROLLER_REPO}:latest"
    (published,) = controller["ports"]
    assert published["mode"] == "host", "the routing mesh (ingress) needs iptables; see docs/deploy.md"
    port = published["target"]
    assert controller["environment"]["PORT"] == str(port)
    for name, svc in services.items():
        assert svc["deploy"]["endpoint_mode"] == "dnsrr", f"{name}: no virtual IP (IPVS) needed"
        assert svc["networks"] == ["agentrl"]
    for task in TASKS:
        svc = services[f"worker-{task}"]
        image = default.fullmatch(svc["image"]).group(1)
        assert image == f"{CONTROLLER_REPO if task in BUILT_IN else worker_repo(task)}:latest"
        env = svc["environment"]
        assert env["TASK"] == task
        url = urlsplit(env["AGENTRL_CONTROLLER_URL"])
        assert (url.hostname, url.port, url.path) == ("controller", port, "/api")
        script = svc["entrypoint"][-2]
        assert '--self "http://$$(hostname -i' in script and '--controller "$$AGENTRL_CONTROLLER_URL"' in script
    assert stack["networks"]["agentrl"]["driver"] == "overlay"


# ---------------------------------------------------------------------------- tokens

SECRET_REF = {"secretKeyRef": {"name": "agentrl-tokens", "key": "worker-secret"}}


def test_k8s_servers_get_their_tokens_from_the_secret():
    """They listen beyond loopback, where the controller and workers refuse to run without tokens."""
    for name, dep in DEPLOYMENTS.items():
        (app,) = [c for c in pod(dep)["containers"] if c["name"] in ("controller", "worker")]
        env = env_of(app)
        assert env.get("AGENTRL_WORKER_SECRET") == SECRET_REF, name
        if name == "agentrl-controller":
            assert env["AGENTRL_CLIENT_TOKEN"] == {"secretKeyRef": {"name": "agentrl-tokens", "key": "client-token"}}
        else:
            assert "AGENTRL_CLIENT_TOKEN" not in env, f"{name}: a worker needs only the worker secret"
    assert "agentrl-tokens" in (K8S / "kustomization.yaml").read_text(), "kustomization.yaml says how to create it"


def test_swarm_services_require_their_tokens():
    required = re.compile(r"\$\{(AGENTRL_CLIENT_TOKEN|AGENTRL_WORKER_SECRET):\?[^}]+\}")
    services = yaml.safe_load(STACK.read_text())["services"]
    for name, svc in services.items():
        env = svc["environment"]
        assert required.fullmatch(env["AGENTRL_WORKER_SECRET"]).group(1) == "AGENTRL_WORKER_SECRET", name
        assert ("AGENTRL_CLIENT_TOKEN" in env) == (name == "controller"), name


# ---------------------------------------------------------------------------- restart policies


def test_dead_workers_are_restarted_and_a_crash_loop_is_bounded():
    """Issue 38: a worker that dies is restarted by its supervisor. Swarm: on any exit, given up
    after 5 restarts within 60 s (swarmkit counts the restarts in the window). Kubernetes: the
    kubelet restarts the container in place (CrashLoopBackOff bounds a crash loop by its backoff)."""
    services = yaml.safe_load(STACK.read_text())["services"]
    for task in TASKS:
        policy = services[f"worker-{task}"]["deploy"]["restart_policy"]
        assert policy == {"condition": "any", "delay": "2s", "max_attempts": 5, "window": "60s"}, task
    assert services["controller"]["deploy"]["restart_policy"]["condition"] == "any"
    for name, dep in DEPLOYMENTS.items():
        if name != "agentrl-controller":
            assert pod(dep)["restartPolicy"] == "Always", name
