#!/usr/bin/env python3
"""Offline validation of everything in deploy/ that can be checked without a cluster.

Kubernetes (k8s/*.yaml)
  - every document parses; objects have apiVersion/kind/metadata.name and the ucudnn namespace;
  - schema: every field name and value type is checked against the object models of the Debian
    package python3-kubernetes (client 22.6: the Kubernetes 1.22 API), required fields included.
    Fields newer than those models are checked by hand: a probe's `grpc` (GRPCAction, GA in
    Kubernetes 1.27) must have an integer `port` (gRPC probes take no named ports) and an
    optional string `service`;
  - workload selectors match their pod labels; Services select a workload and name its ports;
    referenced ConfigMaps and Secrets exist; gRPC probe ports are declared container ports;
  - a container of ucudnn-server with a livenessProbe has a startupProbe that allows the
    server's --start-timeout (UCUDNN_START_TIMEOUT, default from --help) plus 10 s, since the
    server does not listen before its database answers;
  - every ucudnn image has the same tag; the migration Job's name ends with that release
    (ucudnn-migrate-0-1-0 for 0.1.0: a Job's pod template is immutable, so each release is a
    new Job) and it has ttlSecondsAfterFinished.
  - kustomization.yaml lists every manifest, the Namespace first, and generates every Secret
    the workloads use from files under k8s/secrets/ (ignored by git): no Secret is committed;
  - every pod: automountServiceAccountToken false, runAsNonRoot, seccompProfile RuntimeDefault;
    every container: allowPrivilegeEscalation false, capabilities drop ALL, resources (requests
    and a memory limit); Deployments, DaemonSets and StatefulSets have readiness and liveness
    probes; a Deployment of several replicas has a PodDisruptionBudget; images not of ucudnn are
    pinned to a version (name:MAJOR.MINOR...) or a digest;
  - bearer tokens are a mounted file (UCUDNN_TOKEN_FILE under a Secret volume), never an
    environment variable (UCUDNN_TOKENS).
Secrets never in argv (k8s, compose, systemd, scripts/*.sh)
  - no command line passes --tokens, --token VALUE or a database URL with a password, and no
    database URL anywhere embeds a password (libpq's PGPASSWORD / PGPASSFILE carry it).
Monitoring (monitoring/)
  - the Prometheus alert rules parse, each alert has an expr and a summary; the Grafana dashboard
    is JSON with queries; every ucudnn_* metric either names is defined in the server's or the
    worker's metrics code.
Compose (compose/compose.yaml)
  - schema: the Compose Specification schema that Debian's docker-compose (1.29) ships
    (compose/config/compose_spec.json), with the top-level `name` the specification added
    later; services have images and depend only on services it defines.
Environment variables
  - each UCUDNN_* variable a process is given (Kubernetes envFrom/env, compose environment,
    systemd EnvironmentFile) is one its own binary reads, per that binary's --help:
    ucudnn-server, ucudnn-worker, or `ucudnn migrate`; a server-only variable given to the
    worker is an error; each of them gets UCUDNN_DATABASE_URL (needs --bin-dir).
  - every long-running service has a healthcheck; no password or token variable has a default
    (${VAR:-default}); images are pinned like the manifests'.
Docker (docker/Dockerfile, ../.dockerignore)
  - the Dockerfile's scripts/bundle.sh arguments are options of `bundle.sh --help`; the
    runtime stage copies the bundle from where it was made and its ENTRYPOINT is a bundled
    binary; .dockerignore exists and excludes every directory .gitignore ignores (build
    trees, .run/ with the demo's database, bundles); packages are installed before the sources
    are copied (a source change must not reinstall them); the build configures without tests and
    benchmarks; a HEALTHCHECK; the user's UID is the manifests' runAsUser; bases are pinned.
systemd (systemd/)
  - units pass `systemd-analyze verify` (ExecStart pointed at the built binary, or /bin/true);
    the User= and Group= of every unit are created by ucudnn.sysusers.conf, which
    `systemd-sysusers --dry-run` accepts, and every unit's install notes mention it.

Exit status: 0 when everything holds, 1 when something does not (each failure is printed),
77 (skipped) when nothing failed but a check could not run for want of a Debian package.
"""
import argparse
import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML not importable by", sys.executable, "(Debian package python3-yaml)")
    sys.exit(77)

errors = []
skipped = []


def fail(where, what):
    errors.append(f"{where}: {what}")


def skip(what):
    skipped.append(what)


def load_all(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        fail(path, f"YAML does not parse: {e}")
        return []


def parse_duration(text):
    """Seconds in "60s", "2m", "500ms", "1h" (the binaries' duration syntax)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", str(text))
    if not m:
        return None
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]
    return float(m.group(1)) * scale


# ---- Kubernetes schema ------------------------------------------------------------------------
class KubeSchema:
    """Field names and types of the python3-kubernetes models (the Kubernetes API schema)."""

    # Quantities ("1", 1, "512Mi") are typed str in the models.
    QUANTITY_MAPS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}

    def __init__(self, client):
        self.client = client
        self.api = client.ApiClient()

    def model(self, name):
        return getattr(self.client, name, None)

    def check(self, where, obj):
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        version = api_version.split("/")[-1]
        name = version[0].upper() + version[1:] + kind
        if self.model(name) is None:
            fail(where, f"no schema for {api_version} {kind}")
            return
        self.walk(where, obj, name, "")
        try:  # the models' own validation: required fields, enums they know
            self.api._ApiClient__deserialize(obj, name)
        except (ValueError, TypeError) as e:
            fail(where, f"schema: {e}")

    def walk(self, where, value, type_name, path):
        if type_name.startswith("list["):
            if not isinstance(value, list):
                fail(where, f"{path}: expected a list, got {type(value).__name__}")
                return
            for i, item in enumerate(value):
                self.walk(where, item, type_name[5:-1], f"{path}[{i}]")
            return
        if type_name.startswith("dict("):
            if not isinstance(value, dict):
                fail(where, f"{path}: expected a map, got {type(value).__name__}")
                return
            inner = type_name[type_name.index(",") + 1:-1].strip()
            for k, v in value.items():
                self.walk(where, v, inner, f"{path}.{k}")
            return
        scalar = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
                  "datetime": (str,), "date": (str,), "object": (str, int, dict, list),
                  "quantity": (str, int, float)}
        if type_name in scalar:
            ok = isinstance(value, scalar[type_name])
            if type_name in ("int", "float") and isinstance(value, bool):
                ok = False
            if not ok:
                fail(where, f"{path}: expected {type_name}, got {type(value).__name__} {value!r}")
            return
        if type_name == "grpc":
            self.walk_fields(where, value, path, {"port": "int", "service": "str"}, required={"port"})
            return
        model = self.model(type_name)
        if model is None:
            fail(where, f"{path}: unknown type {type_name}")
            return
        fields = {model.attribute_map[a]: t for a, t in model.openapi_types.items()}
        for (owner, field) in self.QUANTITY_MAPS:
            if owner == type_name:
                fields[field] = "dict(str, quantity)"
        if type_name == "V1Probe":  # newer than the models
            fields["grpc"] = "grpc"
        self.walk_fields(where, value, path, fields)

    def walk_fields(self, where, value, path, fields, required=()):
        if not isinstance(value, dict):
            fail(where, f"{path or '/'}: expected an object, got {type(value).__name__}")
            return
        for key, v in value.items():
            if key not in fields:
                fail(where, f"{path}.{key}: no such field (known: {', '.join(sorted(fields))})")
                continue
            self.walk(where, v, fields[key], f"{path}.{key}")
        for key in required:
            if key not in value:
                fail(where, f"{path}.{key}: required")


def pod_spec(obj):
    if obj.get("kind") in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        return obj.get("spec", {}).get("template", {}).get("spec", {})
    return None


def check_k8s(deploy_dir, generated_secrets):
    try:
        import kubernetes.client as kube_client
        schema = KubeSchema(kube_client)
    except ImportError:
        schema = None
        skip("Kubernetes schema: the kubernetes module is missing (Debian package python3-kubernetes)")

    objects = []
    # The base's manifests and those of its optional components (components/NAME/).
    paths = sorted(glob.glob(os.path.join(deploy_dir, "k8s", "*.yaml")))
    paths += sorted(glob.glob(os.path.join(deploy_dir, "k8s", "components", "*", "*.yaml")))
    for path in paths:
        if os.path.basename(path) == KUSTOMIZATION:
            continue
        for obj in load_all(path):
            if not isinstance(obj, dict):
                fail(path, "a document that is not an object")
                continue
            where = f"{os.path.relpath(path, deploy_dir)}:{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            for key in ("apiVersion", "kind", "metadata"):
                if key not in obj:
                    fail(where, f"missing {key}")
            if not obj.get("metadata", {}).get("name"):
                fail(where, "missing metadata.name")
            if obj.get("kind") != "Namespace" and obj.get("metadata", {}).get("namespace") != "ucudnn":
                fail(where, "namespace must be ucudnn")
            if schema:
                schema.check(where, obj)
            objects.append((where, obj))

    names = {(o["kind"], o["metadata"]["name"]) for _, o in objects if "metadata" in o and "kind" in o}
    names |= {("Secret", name) for name in generated_secrets}
    workloads = []
    for where, obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        labels = obj["spec"]["template"].get("metadata", {}).get("labels", {})
        selector = obj["spec"].get("selector", {}).get("matchLabels")
        if obj["kind"] != "Job":
            if not selector:
                fail(where, "missing spec.selector.matchLabels")
            elif any(labels.get(k) != v for k, v in selector.items()):
                fail(where, "selector does not match the pod template's labels")
        containers = spec.get("containers", [])
        if not containers:
            fail(where, "no containers")
        ports = set()
        for c in containers:
            for key in ("name", "image"):
                if not c.get(key):
                    fail(where, f"container without {key}")
            for p in c.get("ports", []):
                ports.add(p.get("containerPort"))
                if p.get("name"):
                    ports.add(p["name"])
        for c in containers:
            for ref in c.get("envFrom", []):
                if "configMapRef" in ref and ("ConfigMap", ref["configMapRef"]["name"]) not in names:
                    fail(where, f"ConfigMap {ref['configMapRef']['name']} is not defined")
                if "secretRef" in ref and ("Secret", ref["secretRef"]["name"]) not in names:
                    fail(where, f"Secret {ref['secretRef']['name']} is not defined")
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ("Secret", ref["name"]) not in names:
                    fail(where, f"Secret {ref['name']} is not defined")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                grpc = (c.get(probe) or {}).get("grpc")
                if not grpc:
                    continue
                port = grpc.get("port")
                if not isinstance(port, int) or isinstance(port, bool):
                    fail(where, f"{probe}.grpc.port {port!r} must be a number (gRPC probes take no named ports)")
                elif port not in ports:
                    fail(where, f"{probe}.grpc.port {port} is not a container port")
        workloads.append((labels, ports))

    for where, obj in objects:
        if obj.get("kind") != "Service":
            continue
        selector = obj.get("spec", {}).get("selector", {})
        matching = [p for labels, p in workloads if all(labels.get(k) == v for k, v in selector.items())]
        if not matching:
            fail(where, "selects no workload")
        for port in obj.get("spec", {}).get("ports", []):
            target = port.get("targetPort", port.get("port"))
            if matching and not any(target in p for p in matching):
                fail(where, f"targetPort {target} is not a port of the selected workload")
    return objects


def check_releases(objects, services):
    """One image tag everywhere; the migration Job is named per release and cleaned up."""
    tags = {}
    for where, obj in objects:
        for c in (pod_spec(obj) or {}).get("containers", []):
            image = c.get("image", "")
            if image.split(":")[0].endswith("ucudnn"):
                tags.setdefault(image.partition(":")[2] or "latest", where)
    for name, svc in services.items():
        image = svc.get("image", "")
        if image.split(":")[0].endswith("ucudnn"):
            tags.setdefault(image.partition(":")[2] or "latest", f"compose:{name}")
    if len(tags) > 1:
        fail("images", "ucudnn images of different tags: " +
             ", ".join(f"{t} ({w})" for t, w in sorted(tags.items())))
    release = next(iter(tags), None)
    for where, obj in objects:
        if obj.get("kind") != "Job":
            continue
        name = obj["metadata"]["name"]
        if release and not name.endswith("-" + re.sub(r"[^a-z0-9]", "-", release.lower())):
            fail(where, f"a Job's pod template is immutable: name it per release "
                        f"(ending in -{re.sub(r'[^a-z0-9]', '-', release.lower())})")
        labels = obj["metadata"].get("labels", {})
        if release and labels.get("app.kubernetes.io/version") != release:
            fail(where, f"label app.kubernetes.io/version should be {release!r}")
        if "ttlSecondsAfterFinished" not in obj.get("spec", {}):
            fail(where, "no spec.ttlSecondsAfterFinished: finished Jobs would pile up")


# ---- Kubernetes: kustomization, hardening, secrets ----------------------------------------------
KUSTOMIZATION = "kustomization.yaml"
LONG_RUNNING = ("Deployment", "DaemonSet", "StatefulSet")


def check_kustomization(deploy_dir):
    """{generated Secret name: its keys, None when they come from an env file}."""
    k8s = os.path.join(deploy_dir, "k8s")
    path = os.path.join(k8s, KUSTOMIZATION)
    where = f"k8s/{KUSTOMIZATION}"
    if not os.path.exists(path):
        fail(where, "missing: `kubectl apply -f` applies files in name order, the Namespace late")
        return {}
    docs = load_all(path)
    doc = docs[0] if docs and isinstance(docs[0], dict) else {}
    resources = doc.get("resources") or []
    manifests = sorted(os.path.basename(p) for p in glob.glob(os.path.join(k8s, "*.yaml"))
                       if os.path.basename(p) != KUSTOMIZATION)
    for missing in sorted(set(manifests) - set(resources)):
        fail(where, f"resources does not list {missing}")
    for extra in sorted(set(resources) - set(manifests)):
        fail(where, f"resources lists {extra}, which does not exist")
    namespaces = [f for f in manifests if any(o.get("kind") == "Namespace"
                                              for o in load_all(os.path.join(k8s, f)))]
    if resources and namespaces and resources[0] not in namespaces:
        fail(where, f"the Namespace ({namespaces[0]}) must come first in resources")
    if doc.get("namespace") != "ucudnn":
        fail(where, "namespace must be ucudnn")
    generated = {}
    for gen in doc.get("secretGenerator") or []:
        keys = []
        for f in gen.get("files") or []:
            key, _, source = f.rpartition("=") if "=" in f else (os.path.basename(f), "", f)
            keys.append(key)
            if not source.startswith("secrets/"):
                fail(where, f"secret {gen.get('name')}: {source} is not under secrets/ (ignored by git)")
        for f in gen.get("envs") or []:
            if not f.startswith("secrets/"):
                fail(where, f"secret {gen.get('name')}: {f} is not under secrets/ (ignored by git)")
        if gen.get("literals"):
            fail(where, f"secret {gen.get('name')}: literals commit the secret's value")
        generated[gen.get("name")] = None if gen.get("envs") else keys
    # Each optional component lists its manifests, and an overlay adds it to the base.
    for comp in sorted(glob.glob(os.path.join(k8s, "components", "*", KUSTOMIZATION))):
        comp_dir = os.path.dirname(comp)
        comp_where = os.path.relpath(comp, os.path.dirname(k8s))
        cdoc = (load_all(comp) or [{}])[0] or {}
        if cdoc.get("kind") != "Component":
            fail(comp_where, "kind must be Component")
        listed = set(cdoc.get("resources") or [])
        present = {os.path.basename(p) for p in glob.glob(os.path.join(comp_dir, "*.yaml"))
                   if os.path.basename(p) != KUSTOMIZATION}
        for missing in sorted(present - listed):
            fail(comp_where, f"resources does not list {missing}")
        for extra in sorted(listed - present):
            fail(comp_where, f"resources lists {extra}, which does not exist")
        name = os.path.basename(comp_dir)
        used = False
        for overlay in glob.glob(os.path.join(k8s, "*", KUSTOMIZATION)):
            odoc = (load_all(overlay) or [{}])[0] or {}
            if f"../components/{name}" in (odoc.get("components") or []):
                used = True
                if ".." not in (odoc.get("resources") or []):
                    fail(os.path.relpath(overlay, os.path.dirname(k8s)), "resources must list .. (the base)")
        if not used:
            fail(comp_where, f"no overlay (k8s/*/{KUSTOMIZATION}) adds component {name}")
    ignore = os.path.join(k8s, "secrets", ".gitignore")
    if generated and (not os.path.exists(ignore) or "*" not in open(ignore).read().split()):
        fail("k8s/secrets/.gitignore", "missing or not ignoring everything: the secrets would be committed")
    return generated


def image_pinned(image):
    """name:MAJOR.MINOR[...] or name@sha256:..."""
    if "@sha256:" in image:
        return True
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    return re.fullmatch(r"v?\d+\.\d+[\w.+-]*", tag) is not None


def check_k8s_hardening(objects):
    pdb_selectors = [o.get("spec", {}).get("selector", {}).get("matchLabels", {})
                     for _, o in objects if o.get("kind") == "PodDisruptionBudget"]
    for where, obj in objects:
        if obj.get("kind") == "Secret":
            fail(where, "a committed Secret (placeholder values get deployed): generate it from "
                        "k8s/secrets/ in kustomization.yaml instead")
        if obj.get("kind") == "ConfigMap":
            for key, value in (obj.get("data") or {}).items():
                if key == "UCUDNN_TOKENS":
                    fail(where, "UCUDNN_TOKENS: tokens belong in a mounted file (UCUDNN_TOKEN_FILE)")
        spec = pod_spec(obj)
        if spec is None:
            continue
        kind = obj.get("kind")
        if spec.get("automountServiceAccountToken") is not False:
            fail(where, "automountServiceAccountToken must be false (no pod here calls the API)")
        pod_sc = spec.get("securityContext") or {}
        if pod_sc.get("runAsNonRoot") is not True:
            fail(where, "securityContext.runAsNonRoot must be true")
        if (pod_sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            fail(where, "securityContext.seccompProfile.type must be RuntimeDefault")
        labels = obj["spec"]["template"].get("metadata", {}).get("labels", {})
        if kind == "Deployment" and obj["spec"].get("replicas", 1) > 1 and not any(
                sel and all(labels.get(k) == v for k, v in sel.items()) for sel in pdb_selectors):
            fail(where, "several replicas but no PodDisruptionBudget selects them")
        secret_volumes = {v["name"] for v in spec.get("volumes") or [] if "secret" in v}
        for c in spec.get("containers", []):
            name = f"{where}:{c.get('name')}"
            sc = c.get("securityContext") or {}
            if sc.get("allowPrivilegeEscalation") is not False:
                fail(name, "securityContext.allowPrivilegeEscalation must be false")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                fail(name, "securityContext.capabilities.drop must include ALL")
            resources = c.get("resources") or {}
            if not resources.get("requests") or "memory" not in (resources.get("limits") or {}):
                fail(name, "resources need requests and a memory limit")
            if kind in LONG_RUNNING:
                for probe in ("readinessProbe", "livenessProbe"):
                    if probe not in c:
                        fail(name, f"no {probe}")
            image = c.get("image", "")
            if not image.split(":")[0].endswith("ucudnn") and not image_pinned(image):
                fail(name, f"image {image} is not pinned to a version (name:15.10) or a digest")
            env = {e.get("name"): e for e in c.get("env") or []}
            if "UCUDNN_TOKENS" in env:
                fail(name, "UCUDNN_TOKENS in the environment: mount the tokens as a file "
                           "(UCUDNN_TOKEN_FILE)")
            mounts = {m.get("name"): m.get("mountPath", "") for m in c.get("volumeMounts") or []}
            token_file = env.get("UCUDNN_TOKEN_FILE", {}).get("value")
            if token_file is None:
                for _, cm in objects:
                    refs = [r["configMapRef"]["name"] for r in c.get("envFrom", []) if "configMapRef" in r]
                    if cm.get("kind") == "ConfigMap" and cm["metadata"]["name"] in refs:
                        token_file = (cm.get("data") or {}).get("UCUDNN_TOKEN_FILE", token_file)
            if token_file and not any(n in secret_volumes and token_file.startswith(p.rstrip("/") + "/")
                                      for n, p in mounts.items()):
                fail(name, f"UCUDNN_TOKEN_FILE {token_file} is not in a mounted Secret volume")


# ---- secrets never on a command line ------------------------------------------------------------
SECRET_FLAG = re.compile(r"^--tokens?(=|$)")
URL_PASSWORD = re.compile(r"://[^/@\s:]+:[^/@\s]+@|password=", re.I)


def secret_in_argv(argv):
    """What in `argv` is a secret, or None."""
    for i, arg in enumerate(argv):
        if SECRET_FLAG.match(arg):
            return f"{arg.split('=')[0]} puts a token on the command line (use --token-file or the environment)"
        value = arg.partition("=")[2] if arg.startswith("--database-url=") else (
            argv[i + 1] if arg == "--database-url" and i + 1 < len(argv) else "")
        if URL_PASSWORD.search(value):
            return "--database-url with a password (use PGPASSWORD or PGPASSFILE)"
    return None


def check_secrets(deploy_dir, objects, services):
    repo = os.path.dirname(os.path.abspath(deploy_dir))
    for where, obj in objects:
        for c in (pod_spec(obj) or {}).get("containers", []):
            problem = secret_in_argv((c.get("command") or []) + (c.get("args") or []))
            if problem:
                fail(f"{where}:{c.get('name')}", problem)
        if obj.get("kind") == "ConfigMap":
            for key, value in (obj.get("data") or {}).items():
                if "DATABASE_URL" in key and URL_PASSWORD.search(str(value)):
                    fail(where, f"{key} embeds a password (use PGPASSWORD from a Secret)")
    for name, svc in services.items():
        argv = []
        for key in ("entrypoint", "command"):
            part = svc.get(key) or []
            argv += shlex.split(part) if isinstance(part, str) else part
        problem = secret_in_argv(argv)
        if problem:
            fail(f"compose:{name}", problem)
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.partition("=")[::2] for e in env)
        for key, value in env.items():
            if "DATABASE_URL" in key and URL_PASSWORD.search(str(value)):
                fail(f"compose:{name}", f"{key} embeds a password (use PGPASSWORD)")
            if key == "UCUDNN_TOKENS":
                fail(f"compose:{name}", "UCUDNN_TOKENS: mount the tokens as a secret file (UCUDNN_TOKEN_FILE)")
    for unit in sorted(glob.glob(os.path.join(deploy_dir, "systemd", "*.service")) +
                       glob.glob(os.path.join(deploy_dir, "systemd", "*.env"))):
        where = os.path.relpath(unit, deploy_dir)
        text = open(unit).read()
        for m in re.finditer(r"^ExecStart=(.+)$", text, re.M):
            problem = secret_in_argv(shlex.split(m.group(1)))
            if problem:
                fail(where, problem)
        for m in re.finditer(r"^\s*(UCUDNN_[A-Z_]+)=(.*)$", text, re.M):
            if m.group(1) == "UCUDNN_TOKENS":
                fail(where, "UCUDNN_TOKENS: give the tokens as a credential file (UCUDNN_TOKEN_FILE)")
            if "DATABASE_URL" in m.group(1) and URL_PASSWORD.search(m.group(2)):
                fail(where, f"{m.group(1)} embeds a password (use PGPASSFILE)")
    for script in sorted(glob.glob(os.path.join(repo, "scripts", "*.sh"))):
        for n, line in enumerate(open(script), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
            try:
                argv = shlex.split(code)
            except ValueError:
                argv = code.split()
            problem = secret_in_argv(argv)
            if problem or re.search(r"\bUCUDNN_TOKENS=", code):
                fail(f"scripts/{os.path.basename(script)}:{n}",
                     problem or "UCUDNN_TOKENS: pass the token file (--token-file)")


# ---- monitoring -----------------------------------------------------------------------------------
METRIC_SOURCES = ("server/src/server_metrics.cc", "worker/src/worker_metrics.cc")


def exported_metrics(repo):
    """Metric families the server and the worker define, read from their sources."""
    names = set()
    for source in METRIC_SOURCES:
        path = os.path.join(repo, source)
        if not os.path.exists(path):
            fail(source, "missing: the metrics it defines cannot be checked")
            continue
        names |= set(re.findall(r'"(ucudnn_[a-z0-9_]+)"', open(path).read()))
    return names


def check_monitoring(deploy_dir):
    """Alert rules and the dashboard parse, and name only metrics the code exports."""
    repo = os.path.dirname(os.path.abspath(deploy_dir))
    known = exported_metrics(repo)
    expressions = []
    rules = os.path.join(deploy_dir, "monitoring", "alerts.yaml")
    dashboard = os.path.join(deploy_dir, "monitoring", "grafana-dashboard.json")
    for path in (rules, dashboard):
        if not os.path.exists(path):
            fail(os.path.relpath(path, deploy_dir), "missing")
    if os.path.exists(rules):
        docs = load_all(rules)
        groups = (docs[0] or {}).get("groups") if docs and isinstance(docs[0], dict) else None
        if not groups:
            fail("monitoring/alerts.yaml", "no rule groups")
        for group in groups or []:
            for rule in group.get("rules") or []:
                where = f"monitoring/alerts.yaml:{rule.get('alert') or rule.get('record')}"
                if not rule.get("expr"):
                    fail(where, "no expr")
                if rule.get("alert") and not (rule.get("annotations") or {}).get("summary"):
                    fail(where, "no summary annotation")
                expressions.append((where, str(rule.get("expr", ""))))
    if os.path.exists(dashboard):
        try:
            doc = json.load(open(dashboard))
        except json.JSONDecodeError as e:
            fail("monitoring/grafana-dashboard.json", f"JSON does not parse: {e}")
            doc = {}
        panels = list(doc.get("panels") or [])
        for panel in list(panels):
            panels += panel.get("panels") or []
        if not any(p.get("targets") for p in panels):
            fail("monitoring/grafana-dashboard.json", "no panel queries anything")
        for panel in panels:
            for target in panel.get("targets") or []:
                expressions.append((f"monitoring/grafana-dashboard.json:{panel.get('title')}",
                                    str(target.get("expr", ""))))
    for where, expr in expressions:
        for metric in sorted(set(re.findall(r"\bucudnn_[a-z0-9_]+", expr))):
            base = re.sub(r"_(bucket|sum|count)$", "", metric)
            if known and metric not in known and base not in known:
                fail(where, f"{metric} is not a metric of the server or the worker")


# ---- compose ------------------------------------------------------------------------------------
def compose_schema_path():
    spec = importlib.util.find_spec("compose")
    candidates = []
    if spec and spec.submodule_search_locations:
        candidates += [os.path.join(p, "config", "compose_spec.json") for p in spec.submodule_search_locations]
    candidates.append("/usr/lib/python3/dist-packages/compose/config/compose_spec.json")
    return next((c for c in candidates if os.path.exists(c)), None)


def check_compose(deploy_dir):
    path = os.path.join(deploy_dir, "compose", "compose.yaml")
    docs = load_all(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        fail(path, "expected one document")
        return {}
    doc = docs[0]
    services = doc.get("services", {})
    for m in re.finditer(r"\$\{([A-Z0-9_]*(?:PASSWORD|TOKEN)[A-Z0-9_]*):?-", open(path).read()):
        fail(f"compose:{m.group(1)}", "a secret with a default value: require it (${VAR:?message})")
    for name, svc in services.items():
        if not svc.get("image"):
            fail(f"compose:{name}", "no image")
        # The ucudnn image runs as 65532: a secret mounted with the host file's owner (short
        # syntax) is unreadable to it when the operator made the file 0600.
        if svc.get("image", "").split(":")[0].endswith("ucudnn"):
            for secret in svc.get("secrets") or []:
                if not isinstance(secret, dict) or str(secret.get("uid")) != "65532":
                    source = secret if isinstance(secret, str) else secret.get("source")
                    fail(f"compose:{name}", f"secret {source}: long syntax with uid/gid 65532 "
                         "and a mode, so that the server (UID 65532) can read it")
        image = svc.get("image", "")
        if image and not image.split(":")[0].endswith("ucudnn") and not image_pinned(image):
            fail(f"compose:{name}", f"image {image} is not pinned to a version or a digest")
        one_shot = svc.get("restart") == "no"
        if not one_shot and not (svc.get("healthcheck") or {}).get("test"):
            fail(f"compose:{name}", "no healthcheck")
        deps = svc.get("depends_on", {})
        for dep in deps if isinstance(deps, (list, dict)) else []:
            if dep not in services:
                fail(f"compose:{name}", f"depends on undefined service {dep}")

    try:
        import jsonschema
    except ImportError:
        skip("compose schema: the jsonschema module is missing (Debian package python3-jsonschema)")
        return services
    schema_path = compose_schema_path()
    if not schema_path:
        skip("compose schema: compose_spec.json not found (Debian package docker-compose)")
        return services
    with open(schema_path) as f:
        schema = json.load(f)
    # The project name; part of the Compose Specification since after docker-compose 1.29.
    schema.setdefault("properties", {}).setdefault(
        "name", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"})
    # It names its draft "http://json-schema.org/draft/2019-09/schema#", a spelling jsonschema
    # does not recognise: take that draft's validator directly.
    validator_class = getattr(jsonschema, "Draft201909Validator", jsonschema.Draft7Validator)
    for e in sorted(validator_class(schema).iter_errors(doc), key=lambda e: list(e.absolute_path)):
        fail(f"compose:{'/'.join(str(p) for p in e.absolute_path) or '/'}", f"schema: {e.message}")
    return services


# ---- Dockerfile ---------------------------------------------------------------------------------
def dockerfile_instructions(path):
    """(instruction, argument text) with continuation lines joined."""
    out, current = [], ""
    for line in open(path):
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def dockerfile_entrypoint(deploy_dir):
    path = os.path.join(deploy_dir, "docker", "Dockerfile")
    if not os.path.exists(path):
        return None
    entry = None
    for word, rest in dockerfile_instructions(path):
        if word == "ENTRYPOINT":
            try:
                entry = json.loads(rest)
            except json.JSONDecodeError:
                entry = shlex.split(rest)
    return entry


def bundle_options(repo):
    """{option: takes a value} from `scripts/bundle.sh --help`."""
    r = subprocess.run(["bash", os.path.join(repo, "scripts", "bundle.sh"), "--help"],
                       capture_output=True, text=True, timeout=30)
    options = {}
    for opt, value in re.findall(r"\[(--[a-z][a-z0-9-]*)( [^\]]+)?\]", r.stdout):
        options[opt] = bool(value)
    return options


def check_docker(deploy_dir):
    repo = os.path.dirname(os.path.abspath(deploy_dir))
    path = os.path.join(deploy_dir, "docker", "Dockerfile")
    where = os.path.relpath(path, deploy_dir)
    if not os.path.exists(path):
        fail(where, "missing")
        return
    options = bundle_options(repo)
    if not options:
        fail("scripts/bundle.sh", "--help lists no options")
        return
    out_dir = None
    calls = 0
    instructions = dockerfile_instructions(path)
    for word, rest in instructions:
        if word != "RUN":
            continue
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        commands, current = [], []
        for token in lexer:  # quoted `bash -c '...'` stays one token
            if token in ("&&", "||", ";", "|", "&"):
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
        for tokens in commands:
            script = next((i for i, t in enumerate(tokens) if t.endswith("scripts/bundle.sh")), None)
            if script is None:
                continue
            calls += 1
            args = tokens[script + 1:]
            i = 0
            while i < len(args):
                opt = args[i]
                if opt not in options:
                    fail(where, f"bundle.sh has no option {opt} (bundle.sh --help: {' '.join(sorted(options))})")
                    i += 1
                    while i < len(args) and not args[i].startswith("-"):  # its value, likely
                        i += 1
                    continue
                if options[opt]:
                    if i + 1 >= len(args):
                        fail(where, f"bundle.sh {opt} needs a value")
                    elif opt == "--out":
                        out_dir = args[i + 1]
                    i += 2
                else:
                    i += 1
    if calls == 0:
        fail(where, "never runs scripts/bundle.sh")
    if out_dir:
        copies = [rest for word, rest in instructions if word == "COPY" and "--from=" in rest]
        if not any(shlex.split(c)[-2] == out_dir for c in copies):
            fail(where, f"the runtime stage does not COPY --from the bundle at {out_dir}")
        entry = dockerfile_entrypoint(deploy_dir) or []
        if not entry or not entry[0].startswith(out_dir.rstrip("/") + "/bin/"):
            fail(where, f"ENTRYPOINT {entry} is not a binary of the bundle ({out_dir}/bin)")

    first_copy = next((i for i, (w, r) in enumerate(instructions)
                       if w == "COPY" and "--from=" not in r and shlex.split(r)[0] == "."), None)
    installs = [i for i, (w, r) in enumerate(instructions)
                if w == "RUN" and "ucudnn_install_packages" in r]
    if not installs or first_copy is None or installs[0] > first_copy:
        fail(where, "install the packages (ucudnn_install_packages) before `COPY . `: every "
                    "source change would reinstall them")
    configure = " ".join(r for w, r in instructions if w == "RUN" and "cmake" in r)
    for option in ("UCUDNN_BUILD_TESTS=OFF", "UCUDNN_BUILD_BENCHMARKS=OFF"):
        if option not in configure:
            fail(where, f"the build stage does not configure with -D{option}")
    if not any(w == "HEALTHCHECK" for w, _ in instructions):
        fail(where, "no HEALTHCHECK")
    args = {}
    for w, r in instructions:
        if w == "ARG" and "=" in r:
            k, _, v = r.partition("=")
            args[k.strip()] = v.strip()
    for w, r in instructions:
        if w != "FROM":
            continue
        base = shlex.split(r)[0]
        m = re.fullmatch(r"\$\{?(\w+)\}?", base)
        base = args.get(m.group(1), base) if m else base
        if not image_pinned(base):
            fail(where, f"base image {base} is not pinned to a version or a digest")
    uids = re.findall(r"--uid\s+(\d+)", " ".join(r for w, r in instructions if w == "RUN"))
    manifest_uids = set()
    for kpath in glob.glob(os.path.join(deploy_dir, "k8s", "*.yaml")):
        for obj in load_all(kpath):
            spec = pod_spec(obj) if isinstance(obj, dict) else None
            for c in (spec or {}).get("containers", []) if spec else []:
                if c.get("image", "").split(":")[0].endswith("ucudnn"):
                    manifest_uids.add(str((spec.get("securityContext") or {}).get("runAsUser")))
    if not uids or any(u not in uids for u in manifest_uids):
        fail(where, f"the image's user (--uid {', '.join(uids) or 'unset'}) is not the manifests' "
                    f"runAsUser ({', '.join(sorted(manifest_uids))})")

    ignore = os.path.join(repo, ".dockerignore")
    if not os.path.exists(ignore):
        fail(".dockerignore", "missing: `COPY . /src` would send build trees and .run/ to the daemon")
        return
    patterns = {line.strip().strip("/") for line in open(ignore)
                if line.strip() and not line.startswith("#")}
    gitignore = os.path.join(repo, ".gitignore")
    if os.path.exists(gitignore):
        for line in open(gitignore):
            entry = line.strip()
            # Directories .gitignore ignores (build trees, .run/ with its database, bundles).
            if entry.endswith("/") and not entry.startswith("#"):
                if entry.strip("/") not in patterns:
                    fail(".dockerignore", f"does not exclude {entry} (ignored by .gitignore)")


# ---- environment variables ------------------------------------------------------------------------
def binary_of(command):
    """'ucudnn-server', 'ucudnn-worker', 'ucudnn migrate' or None for a command line."""
    if not command:
        return None
    name = os.path.basename(command[0])
    if name == "ucudnn":
        sub = next((a for a in command[1:] if not a.startswith("-")), "")
        return f"ucudnn {sub}".strip()
    return name if name.startswith("ucudnn") else None


def consumers(deploy_dir, objects, services):
    """(where, binary, {variable: where it comes from}) for each process deploy/ starts."""
    entry = dockerfile_entrypoint(deploy_dir)
    data = {}
    for _, obj in objects:
        if obj.get("kind") in ("ConfigMap", "Secret"):
            keys = list(obj.get("data", {}) or {}) + list(obj.get("stringData", {}) or {})
            data[(obj["kind"], obj["metadata"]["name"])] = keys
    out = []
    for where, obj in objects:
        for c in (pod_spec(obj) or {}).get("containers", []):
            if not c.get("image", "").split(":")[0].endswith("ucudnn"):
                continue
            command = (c.get("command") or entry or []) + (c.get("args") or [])
            variables = {}
            for ref in c.get("envFrom", []):
                for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                    if key in ref:
                        for k in data.get((kind, ref[key]["name"]), []):
                            variables[k] = f"{kind} {ref[key]['name']}"
            for env in c.get("env", []):
                variables[env["name"]] = "env"
            out.append((f"{where}:{c.get('name')}", binary_of(command), variables))
    for name, svc in services.items():
        if not svc.get("image", "").split(":")[0].endswith("ucudnn"):
            continue
        command = svc.get("entrypoint") or entry or []
        if isinstance(command, str):
            command = shlex.split(command)
        command = command + (shlex.split(svc["command"]) if isinstance(svc.get("command"), str)
                             else svc.get("command") or [])
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.partition("=")[::2] for e in env)
        out.append((f"compose:{name}", binary_of(command), {k: "environment" for k in env}))
    for unit in sorted(glob.glob(os.path.join(deploy_dir, "systemd", "*.service"))):
        text = open(unit).read()
        m = re.search(r"^ExecStart=(.+)$", text, re.M)
        command = shlex.split(m.group(1)) if m else []
        variables = {}
        for env_file in re.findall(r"^EnvironmentFile=-?(\S+)", text, re.M):
            local = os.path.join(deploy_dir, "systemd", os.path.basename(env_file))
            if not os.path.exists(local):
                fail(os.path.relpath(unit, deploy_dir), f"no template {os.path.basename(env_file)} beside it")
                continue
            for line in open(local):
                mm = re.match(r"\s*([A-Z_][A-Z0-9_]*)=", line)
                if mm:
                    variables[mm.group(1)] = os.path.basename(env_file)
        out.append((os.path.relpath(unit, deploy_dir), binary_of(command), variables))
    return out


def documented_variables(bin_dir):
    """{binary: variables its --help names}."""
    helps = {"ucudnn-server": [["ucudnn-server", "--help"]],
             "ucudnn-worker": [["ucudnn-worker", "--help"]],
             "ucudnn migrate": [["ucudnn", "--help"], ["ucudnn", "migrate", "--help"]]}
    documented = {}
    for binary, commands in helps.items():
        names = set()
        for argv in commands:
            path = os.path.join(bin_dir, argv[0])
            if not os.path.exists(path):
                fail(path, "binary not built")
                continue
            r = subprocess.run([path] + argv[1:], capture_output=True, text=True, timeout=30)
            names |= set(re.findall(r"UCUDNN_[A-Z0-9_]+", r.stdout + r.stderr))
            if binary == "ucudnn-server":
                m = re.search(r"--start-timeout.*?\(default: ([^)]+)\)", r.stdout, re.S)
                documented["start-timeout"] = m.group(1) if m else None
                m = re.search(r"--schema-wait.*?\(default: ([^)]+)\)", r.stdout, re.S)
                documented["schema-wait"] = m.group(1) if m else None
        documented[binary] = names
    return documented


def check_variables(processes, documented):
    owners = {}
    for binary in ("ucudnn-server", "ucudnn-worker", "ucudnn migrate"):
        for v in documented.get(binary, ()):
            owners.setdefault(v, []).append(binary)
    for where, binary, variables in processes:
        if binary not in documented:
            fail(where, f"runs {binary or 'no ucudnn binary'}: not one of ucudnn-server, "
                        "ucudnn-worker, ucudnn migrate")
            continue
        for var, source in sorted(variables.items()):
            if not var.startswith("UCUDNN_") or var in documented[binary]:
                continue
            read_by = " and ".join(owners.get(var, [])) or "no binary"
            fail(where, f"{var} (from {source}) is not read by {binary}; {read_by} reads it")
        if "UCUDNN_DATABASE_URL" not in variables:
            fail(where, f"{binary} gets no UCUDNN_DATABASE_URL")


def check_startup_probes(objects, processes, documented):
    """The server waits up to --start-timeout for its database before it listens."""
    by_where = {where: variables for where, _, variables in processes}
    values = {}
    for _, obj in objects:
        if obj.get("kind") == "ConfigMap":
            values.update(obj.get("data") or {})
    for where, obj in objects:
        for c in (pod_spec(obj) or {}).get("containers", []):
            name = f"{where}:{c.get('name')}"
            binary = next((b for w, b, _ in processes if w == name), None)
            if binary != "ucudnn-server" or "livenessProbe" not in c:
                continue
            env = {e["name"]: e.get("value") for e in c.get("env", [])}

            def setting(var, fallback):
                if var in by_where.get(name, {}):
                    return parse_duration(env.get(var) or values.get(var, fallback))
                return parse_duration(fallback)
            timeout = setting("UCUDNN_START_TIMEOUT", documented.get("start-timeout") or "60s")
            if timeout is None:
                fail(name, "UCUDNN_START_TIMEOUT is not a duration")
                continue
            # Without migrating itself, it also waits up to --schema-wait for the migration Job.
            migrates = str(env.get("UCUDNN_AUTO_MIGRATE") or values.get("UCUDNN_AUTO_MIGRATE", "1"))
            if migrates.lower() in ("0", "false", "no", "off"):
                schema_wait = setting("UCUDNN_SCHEMA_WAIT", documented.get("schema-wait") or "5m")
                if schema_wait is None:
                    fail(name, "UCUDNN_SCHEMA_WAIT is not a duration")
                    continue
                timeout = max(timeout, schema_wait)
            probe = c.get("startupProbe")
            if not probe:
                fail(name, f"livenessProbe without startupProbe: the server retries its database "
                           f"for {timeout:g} s before it listens, and would be killed meanwhile")
                continue
            numbers = [probe.get("initialDelaySeconds", 0), probe.get("periodSeconds", 10),
                       probe.get("failureThreshold", 3)]
            if not all(isinstance(n, int) for n in numbers):
                continue  # the schema check reported it
            allowed = numbers[0] + numbers[1] * numbers[2]
            if allowed < timeout + 10:
                fail(name, f"startupProbe allows {allowed} s; the server may wait {timeout:g} s "
                           f"for its database (--start-timeout, --schema-wait) before it listens: "
                           f"allow >= {timeout + 10:g} s")


# ---- systemd --------------------------------------------------------------------------------------
def check_systemd(deploy_dir, bin_dir):
    units = sorted(glob.glob(os.path.join(deploy_dir, "systemd", "*.service")))
    sysusers = os.path.join(deploy_dir, "systemd", "ucudnn.sysusers.conf")
    declared = set()
    if not os.path.exists(sysusers):
        fail("systemd/ucudnn.sysusers.conf", "missing: nothing creates the units' User=")
    else:
        for line in open(sysusers):
            fields = shlex.split(line, comments=True)
            if len(fields) >= 2 and fields[0] in ("u", "g"):
                declared.add(fields[1])
    for unit in units:
        text = open(unit).read()
        where = os.path.relpath(unit, deploy_dir)
        for key in ("User", "Group"):
            for name in re.findall(rf"^{key}=(\S+)", text, re.M):
                if name not in declared:
                    fail(where, f"{key}={name} is not created by ucudnn.sysusers.conf")
        if "sysusers" not in text:
            fail(where, "its install notes do not mention ucudnn.sysusers.conf")

    if not shutil.which("systemd-analyze"):
        skip("systemd: systemd-analyze not found (Debian package systemd)")
        return
    if os.path.exists(sysusers) and shutil.which("systemd-sysusers"):
        with tempfile.TemporaryDirectory() as root:
            r = subprocess.run(["systemd-sysusers", "--dry-run", f"--root={root}", sysusers],
                               capture_output=True, text=True)
            if r.returncode != 0:
                fail("systemd/ucudnn.sysusers.conf", "systemd-sysusers --dry-run: " + (r.stderr or r.stdout).strip())
    with tempfile.TemporaryDirectory() as tmp:
        for unit in units:
            text = open(unit).read()
            binary = re.search(r"^ExecStart=(\S+)", text, re.M).group(1)
            local = os.path.join(bin_dir, os.path.basename(binary)) if bin_dir else ""
            text = re.sub(r"^ExecStart=\S+", "ExecStart=" + (local if os.path.exists(local) else "/bin/true"), text, flags=re.M)
            # The environment file and service user live on the target host, not here.
            text = re.sub(r"^EnvironmentFile=", "EnvironmentFile=-", text, flags=re.M)
            text = re.sub(r"^(User|Group|SupplementaryGroups)=.*$", "", text, flags=re.M)
            copy = os.path.join(tmp, os.path.basename(unit))
            open(copy, "w").write(text)
            r = subprocess.run(["systemd-analyze", "verify", copy], capture_output=True, text=True)
            # It exits 0 on settings it ignores (a bad value, an unknown key) but names them.
            own = [line for line in (r.stderr + r.stdout).splitlines() if copy in line]
            if r.returncode != 0 or own:
                fail(os.path.relpath(unit, deploy_dir), "systemd-analyze verify: " +
                     "; ".join(own or [(r.stderr or r.stdout).strip()]).replace(copy, os.path.basename(unit)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deploy-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--bin-dir", help="build/bin: variables are checked against each binary's "
                    "--help (default: the source tree's build/bin, when it holds the binaries)")
    args = ap.parse_args()
    if not args.bin_dir:
        built = os.path.join(os.path.dirname(os.path.abspath(args.deploy_dir)), "build", "bin")
        if os.access(os.path.join(built, "ucudnn-server"), os.X_OK):
            args.bin_dir = built
    if args.bin_dir:
        args.bin_dir = os.path.abspath(args.bin_dir)
    generated = check_kustomization(args.deploy_dir)
    objects = check_k8s(args.deploy_dir, generated)
    check_k8s_hardening(objects)
    services = check_compose(args.deploy_dir)
    check_secrets(args.deploy_dir, objects, services)
    check_monitoring(args.deploy_dir)
    check_releases(objects, services)
    check_docker(args.deploy_dir)
    processes = consumers(args.deploy_dir, objects, services)
    if args.bin_dir:
        documented = documented_variables(args.bin_dir)
        check_variables(processes, documented)
        check_startup_probes(objects, processes, documented)
    else:
        skip("variables and startup probes: no --bin-dir to read the binaries' --help from")
    check_systemd(args.deploy_dir, args.bin_dir)
    for e in errors:
        print("FAIL", e)
    for s in skipped:
        print("SKIP", s)
    print(f"deploy/: {len(objects)} Kubernetes objects, {len(services)} compose services, "
          f"{len(processes)} processes' environments checked; {len(errors)} problem(s), "
          f"{len(skipped)} check(s) skipped")
    if errors:
        return 1
    return 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
