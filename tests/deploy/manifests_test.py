"""Sanity of the deployment files against each other and against rill-server itself: the compose
file, the Kubernetes manifests (docker/k8s), the Dockerfile, Prometheus' scrape config and Grafana's
provisioning. Ports are the server's defaults (server/server_config.h), probes and health checks
point at /health, the grace periods outlast the drain timeout, names that refer to each other
match, and the ConfigMap's config.json holds only fields rill-server knows (and, when RILL_SERVER
is set, the real server starts with it). Needs PyYAML (Debian python3-yaml); exits 77 (skipped)
without it."""
import json
import os
import re
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML not found (apt-get install python3-yaml, or scripts/install_deps.sh)")
    sys.exit(77)

SOURCE_DIR = os.environ.get("RILL_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))
DOCKER = os.path.join(SOURCE_DIR, "docker")
K8S = os.path.join(DOCKER, "k8s")


def read(*path):
    with open(os.path.join(SOURCE_DIR, *path)) as f:
        return f.read()


def load_yaml(*path):
    return yaml.safe_load(read(*path))


def server_default(field, text=None):
    """A ServerConfig member's default from server/server_config.h ("int http_port = 8000;")."""
    text = text or read("server/server_config.h")
    m = re.search(rf"\b{field}\s*=\s*([0-9.]+)\s*;", text)
    assert m, f"no default for {field} in server/server_config.h"
    return float(m.group(1)) if "." in m.group(1) else int(m.group(1))


def known_config_paths():
    """Every JSON path rill-server accepts: its own table ({"http_port", "--http-port", ...} in
    server/server_config.cc) and the engine option table every program shares ({"block_size",
    "--block-size", ...} in engine/runner/engine_options.cc), which the server nests under "engine."."""
    own = set(re.findall(r'\{"([a-z_.]+)",\s*"--', read("server/server_config.cc")))
    engine = re.findall(r'\{"([a-z_]+)",\s*"--', read("engine/runner/engine_options.cc"))
    return own | {"engine." + key for key in engine}


def config_paths(config):
    for key, value in config.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            for k2 in value:
                yield f"{key}.{k2}"
        else:
            yield key


def seconds(duration):
    """A compose duration ("45s", "1m30s") in seconds."""
    total = 0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration):
        total += float(amount) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


HTTP_PORT = server_default("http_port")
GRPC_PORT = server_default("grpc_port")
DRAIN_TIMEOUT_S = server_default("drain_timeout_s")


class ServerDefaultsTest(unittest.TestCase):
    def test_documented_ports(self):
        # docs/api.md, the README and every file below assume these.
        self.assertEqual((HTTP_PORT, GRPC_PORT), (8000, 50051))


class DockerfileTest(unittest.TestCase):
    text = read("docker/Dockerfile")

    def test_stages_and_runtime(self):
        froms = re.findall(r"^FROM\s+(\S+)", self.text, re.M)
        self.assertEqual(len(froms), 2, froms)
        self.assertIn("-devel-", froms[0])
        self.assertIn("-runtime-", froms[1])
        self.assertTrue(all(f.startswith("nvidia/cuda:") for f in froms))
        self.assertIn("scripts/install_deps.sh", self.text)
        self.assertIn("scripts/build.sh -DRILL_BUILD_TESTS=OFF", self.text)
        self.assertIn("models/rill-shakespeare", self.text)

    def test_ports_user_health_and_command(self):
        self.assertEqual(re.search(r"^EXPOSE\s+(.*)$", self.text, re.M).group(1).split(),
                         [str(HTTP_PORT), str(GRPC_PORT)])
        user = re.findall(r"^USER\s+(\S+)", self.text, re.M)
        self.assertTrue(user and user[-1] not in ("root", "0"), user)
        joined = self.text.replace("\\\n", " ")  # continuation lines joined
        health = re.search(r"^HEALTHCHECK .*$", joined, re.M).group(0)
        self.assertIn(f"127.0.0.1:{HTTP_PORT}/health", health)
        cmd = json.loads(re.search(r"^CMD\s+(\[.*\])\s*$", joined, re.M).group(1))
        self.assertEqual(cmd[0], "rill-server")
        self.assertIn("0.0.0.0", cmd)

    def test_dockerignore_keeps_build_trees_out(self):
        ignore = read(".dockerignore").split()
        self.assertIn("build*/", ignore)
        self.assertIn(".git", ignore)


class ComposeTest(unittest.TestCase):
    compose = load_yaml("docker/compose.yaml")

    def test_services(self):
        self.assertEqual(set(self.compose["services"]), {"rill-server", "prometheus", "grafana"})

    def test_rill_server(self):
        s = self.compose["services"]["rill-server"]
        self.assertEqual(s["build"]["dockerfile"], "docker/Dockerfile")
        self.assertTrue(os.path.isfile(os.path.join(DOCKER, s["build"]["context"], s["build"]["dockerfile"])))
        self.assertIn(f"{HTTP_PORT}:{HTTP_PORT}", s["ports"])
        self.assertIn(f"{GRPC_PORT}:{GRPC_PORT}", s["ports"])
        device = s["deploy"]["resources"]["reservations"]["devices"][0]
        self.assertEqual(device["driver"], "nvidia")
        self.assertIn("gpu", device["capabilities"])
        test = s["healthcheck"]["test"]
        self.assertEqual(test[0], "CMD")
        self.assertIn(f"http://127.0.0.1:{HTTP_PORT}/health", test)
        config = json.loads(read("configs/default.json"))
        self.assertGreater(seconds(s["stop_grace_period"]), config.get("drain_timeout_s", DRAIN_TIMEOUT_S))

    def test_prometheus_scrapes_the_server(self):
        s = self.compose["services"]["prometheus"]
        mounts = dict(v.split(":")[:2] for v in s["volumes"] if v.startswith("./"))
        self.assertEqual(mounts["./prometheus"], "/etc/prometheus")
        config = load_yaml("docker/prometheus/prometheus.yml")
        self.assertIn("--config.file=/etc/prometheus/prometheus.yml", s["command"])
        self.assertEqual(config["global"]["scrape_interval"], "5s")
        for rules in config["rule_files"]:
            self.assertTrue(os.path.isfile(os.path.join(DOCKER, "prometheus", rules)), rules)
        (job,) = config["scrape_configs"]
        self.assertEqual(job.get("metrics_path", "/metrics"), "/metrics")
        targets = [t for sc in job["static_configs"] for t in sc["targets"]]
        self.assertEqual(targets, [f"rill-server:{HTTP_PORT}"])

    def test_grafana_provisioning(self):
        s = self.compose["services"]["grafana"]
        mounts = dict(v.split(":")[:2] for v in s["volumes"] if v.startswith("./"))
        self.assertEqual(mounts["./grafana/provisioning"], "/etc/grafana/provisioning")
        sources = load_yaml("docker/grafana/provisioning/datasources/prometheus.yml")["datasources"]
        (source,) = sources
        self.assertEqual(source["type"], "prometheus")
        self.assertEqual(source["url"], "http://prometheus:9090")
        (provider,) = load_yaml("docker/grafana/provisioning/dashboards/rill.yml")["providers"]
        # The provider reads the directory compose mounts the dashboards into.
        self.assertEqual(mounts["./grafana/dashboards"], provider["options"]["path"])
        self.assertTrue(s["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].startswith(
            provider["options"]["path"] + "/"))
        with open(os.path.join(DOCKER, "grafana/dashboards/rill.json")) as f:
            dashboard = json.load(f)
        (ds_var,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
        self.assertEqual(ds_var["current"]["value"], source["uid"])


class KubernetesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects = {}
        kustomization = load_yaml("docker/k8s/kustomization.yaml")
        cls.resources = kustomization["resources"]
        for name in sorted(os.listdir(K8S)):
            if name in ("kustomization.yaml", "prometheus-adapter-rules.yaml"):
                continue
            for doc in yaml.safe_load_all(read("docker/k8s", name)):
                cls.objects[(doc["kind"], doc["metadata"]["name"])] = (name, doc)
        cls.deployment = cls.objects[("Deployment", "rill-server")][1]
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        (cls.container,) = cls.pod["containers"]
        cm = cls.objects[("ConfigMap", "rill-server-config")][1]
        cls.config = json.loads(cm["data"]["config.json"])

    def test_every_object_is_namespace_agnostic_and_listed(self):
        files = set()
        for (kind, name), (file, doc) in self.objects.items():
            self.assertNotIn("namespace", doc["metadata"], f"{file}: {kind}/{name}")
            self.assertIn("apiVersion", doc)
            files.add(file)
        # Everything but the operator's ServiceMonitor is applied by kubectl apply -k.
        self.assertEqual(files - set(self.resources), {"servicemonitor.yaml"})
        for r in self.resources:
            self.assertTrue(os.path.isfile(os.path.join(K8S, r)), r)

    def container_port(self, port):
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        return ports.get(port, port)

    def test_deployment(self):
        d, c = self.deployment, self.container
        self.assertEqual(d["apiVersion"], "apps/v1")
        self.assertNotIn("replicas", d["spec"], "the HPA owns the replica count")
        labels = d["spec"]["template"]["metadata"]["labels"]
        for k, v in d["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels[k], v)
        self.assertEqual({p["name"]: p["containerPort"] for p in c["ports"]}, {"http": HTTP_PORT, "grpc": GRPC_PORT})
        self.assertEqual(str(c["resources"]["limits"]["nvidia.com/gpu"]), "1")
        self.assertTrue(self.pod["securityContext"]["runAsNonRoot"])
        image_user = re.findall(r"^USER\s+(\d+)", read("docker/Dockerfile"), re.M)[-1]
        self.assertEqual(self.pod["securityContext"]["runAsUser"], int(image_user))
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], "/health", probe)
            self.assertEqual(self.container_port(get["port"]), HTTP_PORT, probe)
        # The model loads under the startup probe: give it minutes, not seconds.
        startup = c["startupProbe"]
        self.assertGreaterEqual(startup["periodSeconds"] * startup["failureThreshold"], 300)
        self.assertGreater(c["livenessProbe"]["initialDelaySeconds"], 0)

    def test_graceful_termination_outlasts_the_drain(self):
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        drain = self.config.get("drain_timeout_s", DRAIN_TIMEOUT_S)
        # After the drain the server closes its listeners (up to 2 s each, server/main.cc).
        self.assertGreater(self.pod["terminationGracePeriodSeconds"], float(pre_stop[1]) + drain + 4)

    def test_config_map_is_a_server_config(self):
        cfg = self.config
        self.assertEqual((cfg["http_port"], cfg["grpc_port"]), (HTTP_PORT, GRPC_PORT))
        self.assertEqual(cfg["host"], "0.0.0.0")
        unknown = set(config_paths(cfg)) - known_config_paths()
        self.assertEqual(unknown, set(), "fields rill-server does not know")
        # The model the image carries (docker/Dockerfile copies models/<name> to /opt/rill/models/).
        model = os.path.relpath(cfg["model"], "/opt/rill")
        self.assertTrue(os.path.isdir(os.path.join(SOURCE_DIR, model)), model)
        self.assertIn(f"/opt/rill/{model}/", read("docker/Dockerfile"))
        # The container reads it where the ConfigMap is mounted.
        args = self.container["args"]
        path = args[args.index("--config") + 1]
        (mount,) = [m for m in self.container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in self.pod["volumes"] if v["name"] == mount["name"]]
        self.assertEqual(volume["configMap"]["name"], "rill-server-config")
        self.assertEqual(os.path.basename(path), "config.json")

    @unittest.skipUnless(os.environ.get("RILL_SERVER"), "RILL_SERVER not set")
    def test_config_map_starts_the_real_server(self):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "tests/server"))
        from harness import Server
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(self.config, f)
            f.flush()
            # Flags override the file: the CPU, loopback and ephemeral ports, the repository's model.
            server = Server("--config", f.name, "--model", os.path.join(SOURCE_DIR, "models/rill-shakespeare"))
            try:
                status, body = server.get("/v1/models")
                self.assertEqual(status, 200)
                self.assertEqual(json.loads(body)["data"][0]["id"], self.config["served_model_name"])
            finally:
                self.assertEqual(server.stop(), 0)

    def test_services(self):
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        for name in ("rill-server", "rill-server-headless"):
            svc = self.objects[("Service", name)][1]["spec"]
            for k, v in svc["selector"].items():
                self.assertEqual(labels[k], v, name)
            ports = {p["name"]: p for p in svc["ports"]}
            self.assertEqual(ports["http"]["port"], HTTP_PORT)
            self.assertEqual(ports["grpc"]["port"], GRPC_PORT)
            for p in svc["ports"]:
                self.assertEqual(self.container_port(p["targetPort"]), p["port"], name)
        self.assertEqual(self.objects[("Service", "rill-server-headless")][1]["spec"]["clusterIP"], "None")

    def test_scraping(self):
        ann = self.deployment["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(int(ann["prometheus.io/port"]), HTTP_PORT)
        self.assertEqual(ann["prometheus.io/path"], "/metrics")
        sm = self.objects[("ServiceMonitor", "rill-server")][1]
        svc = self.objects[("Service", "rill-server")][1]
        for k, v in sm["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(svc["metadata"]["labels"][k], v)
        (endpoint,) = sm["spec"]["endpoints"]
        self.assertIn(endpoint["port"], [p["name"] for p in svc["spec"]["ports"]])
        self.assertEqual(endpoint["path"], "/metrics")

    def test_autoscaler_on_the_queue(self):
        hpa = self.objects[("HorizontalPodAutoscaler", "rill-server")][1]
        self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
        ref = hpa["spec"]["scaleTargetRef"]
        self.assertEqual((ref["kind"], ref["name"]), ("Deployment", "rill-server"))
        self.assertLessEqual(hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])
        (metric,) = hpa["spec"]["metrics"]
        self.assertEqual(metric["type"], "Pods")
        name = metric["pods"]["metric"]["name"]
        self.assertEqual(name, "rill_requests_waiting")
        # The Prometheus adapter serves that name, per pod, from the server's gauge.
        (rule,) = load_yaml("docker/k8s/prometheus-adapter-rules.yaml")["rules"]["custom"]
        self.assertEqual(rule["name"]["as"], name)
        self.assertTrue(rule["seriesQuery"].startswith("rill_requests_waiting{"))
        self.assertEqual(rule["resources"]["overrides"]["pod"]["resource"], "pod")
        self.assertEqual(rule["resources"]["overrides"]["namespace"]["resource"], "namespace")
        self.assertIn("<<.Series>>{<<.LabelMatchers>>}", rule["metricsQuery"])
        self.assertIn("| `rill_requests_waiting` |", read("docs/metrics.md"))


if __name__ == "__main__":
    unittest.main()
