#!/usr/bin/env python3
"""Offline validation of everything in deploy/ that can be checked without a cluster.

- every YAML file parses; Kubernetes objects have apiVersion/kind/metadata.name and the project
  namespace; workload selectors match their pod labels; Services select an existing workload and
  name existing container ports; referenced ConfigMaps and Secrets exist; gRPC probes point at a
  declared container port;
- the compose file's services have images and depend only on services it defines;
- every UCUDNN_* variable set anywhere in deploy/ is one the binaries document in --help
  (when the binaries are given with --bin-dir);
- systemd units pass `systemd-analyze verify` (ExecStart pointed at the built binary, or /bin/true).
Exit status 0 when everything holds; each failure is printed.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

errors = []


def fail(where, what):
    errors.append(f"{where}: {what}")


def load_all(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        fail(path, f"YAML does not parse: {e}")
        return []


def pod_spec(obj):
    kind = obj.get("kind")
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
        return obj.get("spec", {}).get("template", {}).get("spec", {})
    return None


def check_k8s(deploy_dir):
    objects = []
    for path in sorted(glob.glob(os.path.join(deploy_dir, "k8s", "*.yaml"))):
        for obj in load_all(path):
            where = f"{os.path.relpath(path, deploy_dir)}:{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            for key in ("apiVersion", "kind", "metadata"):
                if key not in obj:
                    fail(where, f"missing {key}")
            if not obj.get("metadata", {}).get("name"):
                fail(where, "missing metadata.name")
            if obj.get("kind") != "Namespace" and obj.get("metadata", {}).get("namespace") != "ucudnn":
                fail(where, "namespace must be ucudnn")
            objects.append((where, obj))

    names = {(o["kind"], o["metadata"]["name"]) for _, o in objects if "metadata" in o}
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
                grpc = c.get(probe, {}).get("grpc")
                if grpc and grpc.get("port") not in ports:
                    fail(where, f"{probe}.grpc.port {grpc.get('port')} is not a container port")
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


def check_compose(deploy_dir):
    path = os.path.join(deploy_dir, "compose", "compose.yaml")
    docs = load_all(path)
    if len(docs) != 1:
        fail(path, "expected one document")
        return {}
    services = docs[0].get("services", {})
    for name, svc in services.items():
        if not svc.get("image"):
            fail(f"compose:{name}", "no image")
        deps = svc.get("depends_on", {})
        for dep in deps if isinstance(deps, (list, dict)) else []:
            if dep not in services:
                fail(f"compose:{name}", f"depends on undefined service {dep}")
    return services


def used_variables(deploy_dir, objects, services):
    used = {}
    for where, obj in objects:
        if obj.get("kind") in ("ConfigMap", "Secret"):
            for key in list(obj.get("data", {})) + list(obj.get("stringData", {})):
                used.setdefault(key, where)
    for name, svc in services.items():
        for key in svc.get("environment", {}) or {}:
            used.setdefault(key, f"compose:{name}")
    for path in glob.glob(os.path.join(deploy_dir, "systemd", "*.env")):
        for line in open(path):
            m = re.match(r"\s*([A-Z_][A-Z0-9_]*)=", line)
            if m:
                used.setdefault(m.group(1), os.path.relpath(path, deploy_dir))
    return {k: v for k, v in used.items() if k.startswith("UCUDNN_")}


def check_variables(used, bin_dir):
    documented = set()
    for binary in ("ucudnn-server", "ucudnn-worker", "ucudnn"):
        path = os.path.join(bin_dir, binary)
        if not os.path.exists(path):
            fail(path, "binary not built")
            continue
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        documented |= set(re.findall(r"UCUDNN_[A-Z0-9_]+", out.stdout + out.stderr))
    for var, where in sorted(used.items()):
        if var not in documented:
            fail(where, f"{var} is not documented by any binary's --help")


def check_systemd(deploy_dir, bin_dir):
    if not shutil.which("systemd-analyze"):
        fail("systemd", "systemd-analyze not found (Debian package systemd)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for unit in glob.glob(os.path.join(deploy_dir, "systemd", "*.service")):
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
            if r.returncode != 0:
                fail(unit, "systemd-analyze verify: " + (r.stderr or r.stdout).strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deploy-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--bin-dir", help="build/bin, to check variables against --help")
    args = ap.parse_args()
    objects = check_k8s(args.deploy_dir)
    services = check_compose(args.deploy_dir)
    used = used_variables(args.deploy_dir, objects, services)
    if args.bin_dir:
        check_variables(used, args.bin_dir)
    check_systemd(args.deploy_dir, args.bin_dir)
    for e in errors:
        print("FAIL", e)
    print(f"deploy/: {len(objects)} Kubernetes objects, {len(services)} compose services, "
          f"{len(used)} UCUDNN_* variables checked; {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
