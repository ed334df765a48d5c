"""Structural checks of deploy/kubernetes/ that need no cluster and no downloaded schema.

Run by tests/kubernetes_assets.rs: python3 check_manifests.py DEPLOY_DIR ALERTS_YML OUT_DIR.
Checks that the objects refer to each other by the names, labels and ports they really
have, that the probes point at the listener's routes on the port the container exposes,
and that the PrometheusRule's spec is grafana/alerts.yml, value for value. Writes the
ConfigMap's relay.toml and the PrometheusRule's spec (as a rule file) to OUT_DIR for the
checks that follow (the relay's own config reader, promtool). Exits 1 naming every
problem.
"""

import re
import sys
from pathlib import Path

import yaml

deploy, alerts_path, out = (Path(arg) for arg in sys.argv[1:4])
problems = []


def check(condition, message):
    if not condition:
        problems.append(message)
    return condition


docs = {}
for path in sorted(deploy.glob("*.yaml")):
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is None:
            continue
        kind = doc.get("kind")
        check(isinstance(doc.get("apiVersion"), str), f"{path.name}: {kind} has no apiVersion")
        if kind == "Kustomization":
            docs[kind] = (path, doc)
            continue
        meta = doc.get("metadata", {})
        check(meta.get("name") == "outbox-relay", f"{path.name}: {kind} is not named outbox-relay")
        check(
            meta.get("labels", {}).get("app.kubernetes.io/name") == "outbox-relay",
            f"{path.name}: {kind} lacks the label app.kubernetes.io/name: outbox-relay",
        )
        check(kind not in docs, f"{path.name}: a second {kind}")
        docs[kind] = (path, doc)

expected = {"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule", "Kustomization"}
check(set(docs) == expected, f"objects {sorted(docs)}, expected {sorted(expected)}")
if problems:
    sys.exit("\n".join(problems))

files = {path.name for path, _ in docs.values()} - {"kustomization.yaml"}
_, kustomization = docs["Kustomization"]
check(set(kustomization["resources"]) == files, f"kustomization.yaml lists {kustomization['resources']}, the files are {sorted(files)}")


def subset(small, big):
    return all(big.get(key) == value for key, value in small.items())


# Deployment: selector, container, port, probes, config volume.
_, deployment = docs["Deployment"]
spec = deployment["spec"]
pod = spec["template"]
check(subset(spec["selector"]["matchLabels"], pod["metadata"]["labels"]), "Deployment: selector does not match the pod labels")
containers = pod["spec"]["containers"]
check(len(containers) == 1, "Deployment: one container expected")
container = containers[0]
ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
check(ports == {"metrics": 9464}, f"Deployment: container ports {ports}, expected metrics: 9464")
for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
    get = container.get(probe, {}).get("httpGet", {})
    check(get.get("path") == path, f"Deployment: {probe} path {get.get('path')}, expected {path}")
    check(get.get("port") in ("metrics", 9464), f"Deployment: {probe} port {get.get('port')} is not the listener's")
readiness_timeout = container["readinessProbe"].get("timeoutSeconds", 1)
check(readiness_timeout > 2, f"Deployment: readinessProbe timeoutSeconds {readiness_timeout} is not above the relay's 2 s check")
args = container.get("args", [])
check("--config" in args and args[-1] == "run", f"Deployment: args {args} do not run the daemon with --config")
config_file = Path(args[args.index("--config") + 1]) if "--config" in args else None
mounts = {mount["name"]: mount["mountPath"] for mount in container.get("volumeMounts", [])}
volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes", [])}
config_volumes = [name for name, volume in volumes.items() if volume.get("configMap", {}).get("name") == "outbox-relay"]
check(len(config_volumes) == 1, "Deployment: no volume from the ConfigMap outbox-relay")
if config_volumes and config_file is not None:
    check(
        mounts.get(config_volumes[0]) is not None and config_file.parent == Path(mounts[config_volumes[0]]),
        f"Deployment: --config {config_file} is not in the ConfigMap's mount {mounts.get(config_volumes[0])}",
    )
    _, configmap = docs["ConfigMap"]
    check(config_file.name in configmap["data"], f"ConfigMap has no key {config_file.name}")
env = {var["name"] for var in container.get("env", [])}
check("OUTBOX_DATABASE_URL" in env, "Deployment: OUTBOX_DATABASE_URL is not set (the password stays out of the ConfigMap)")

# The ConfigMap's relay.toml, for the relay's own reader; its timing against the pod's.
_, configmap = docs["ConfigMap"]
toml_text = configmap["data"].get("relay.toml", "")
(out / "relay.toml").write_text(toml_text)
shutdown = re.search(r'^shutdown_timeout = "(\d+)s"', toml_text, re.M)
grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
check(shutdown is not None and int(shutdown.group(1)) < grace, f"terminationGracePeriodSeconds {grace} is not above relay.toml's shutdown_timeout")
token_env = re.search(r'^token_env = "(\w+)"', toml_text, re.M)
check(token_env is None or token_env.group(1) in env, "Deployment does not set relay.toml's token_env")

# Service: selects the pods, names the port the ServiceMonitor scrapes.
_, service = docs["Service"]
check(subset(service["spec"]["selector"], pod["metadata"]["labels"]), "Service: selector does not match the pod labels")
service_ports = {port["name"]: port for port in service["spec"]["ports"]}
check(service_ports.get("metrics", {}).get("targetPort") in ("metrics", 9464), "Service: port metrics does not target the container's metrics port")

# ServiceMonitor: selects the Service, scrapes its metrics port at /metrics.
_, monitor = docs["ServiceMonitor"]
check(subset(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]), "ServiceMonitor: selector does not match the Service's labels")
endpoints = monitor["spec"]["endpoints"]
check([e.get("port") for e in endpoints] == ["metrics"], f"ServiceMonitor: endpoints {endpoints} do not scrape port metrics")
check(all(e.get("path", "/metrics") == "/metrics" for e in endpoints), "ServiceMonitor: path is not /metrics")
# The Service's name becomes the job label, which alerts.yml's OutboxRelayDown names.
alerts_text = alerts_path.read_text()
check(f'up{{job="{service["metadata"]["name"]}"}}' in alerts_text, "alerts.yml's up{job=…} does not name the Service")

# PrometheusRule: its spec is alerts.yml.
_, rule = docs["PrometheusRule"]
check(rule["apiVersion"] == "monitoring.coreos.com/v1", "PrometheusRule: apiVersion")
check(rule["spec"] == yaml.safe_load(alerts_text), "PrometheusRule: spec differs from grafana/alerts.yml")
(out / "alerts.yml").write_text(yaml.safe_dump(rule["spec"], sort_keys=False))

if problems:
    sys.exit("deploy/kubernetes:\n  " + "\n  ".join(problems))
print(f"checked {len(docs)} objects")
