#!/usr/bin/env python3
"""deploy/validate.py catches the mistakes it is there for: each case copies deploy/ (with
scripts/bundle.sh, .gitignore and .dockerignore) to a temporary tree, makes one mistake there,
and expects validate.py to exit 1 naming it; the unchanged copy must pass.

    tests/tools/validate_mutations.py SOURCE_DIR BIN_DIR
Exit status 0 when every case holds, 1 otherwise, 77 when validate.py skips (a package missing).
"""
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile


def replace(path, old, new, count=1):
    def apply(root):
        full = os.path.join(root, path)
        text = open(full).read()
        if old not in text:
            raise AssertionError(f"{path}: {old!r} not found: the case is stale")
        open(full, "w").write(text.replace(old, new, count))
    return apply


def remove(path):
    return lambda root: os.remove(os.path.join(root, path))


def chain(*steps):
    def apply(root):
        for s in steps:
            s(root)
    return apply


CASES = [
    ("server-only variable given to the worker",
     replace("deploy/k8s/worker-daemonset.yaml", "                name: ucudnn-database",
             "                name: ucudnn-database\n            - secretRef:\n                name: ucudnn-tokens"),
     r"UCUDNN_TOKENS \(from Secret ucudnn-tokens\) is not read by ucudnn-worker; ucudnn-server reads it"),
    ("server-only variable in the worker's environment file",
     replace("deploy/systemd/worker.env", "UCUDNN_LOG_LEVEL=info", "UCUDNN_LOG_LEVEL=info\nUCUDNN_LISTEN=0.0.0.0:1"),
     r"ucudnn-worker.service: UCUDNN_LISTEN .* is not read by ucudnn-worker"),
    ("a variable no binary reads",
     replace("deploy/compose/compose.yaml", "      UCUDNN_LOG_LEVEL: info", "      UCUDNN_LOG_LEVL: info"),
     r"UCUDNN_LOG_LEVL .* no binary reads it"),
    ("the Dockerfile calls bundle.sh with an option it lacks",
     replace("deploy/docker/Dockerfile", "--out /opt/ucudnn", "--output /opt/ucudnn"),
     r"bundle.sh has no option --output"),
    ("no .dockerignore",
     remove(".dockerignore"), r"\.dockerignore: missing"),
    (".dockerignore lets .run/ in",
     replace(".dockerignore", "\n.run/\n", "\n"), r"does not exclude /\.run/"),
    ("liveness without a startup probe",
     replace("deploy/k8s/server-deployment.yaml", "          startupProbe:", "          startupProbx:"),
     r"livenessProbe without startupProbe"),
    ("a startup probe shorter than the start timeout",
     replace("deploy/k8s/server-deployment.yaml", "failureThreshold: 18", "failureThreshold: 10"),
     r"startupProbe allows 50 s"),
    ("a start timeout longer than the startup probe allows",
     replace("deploy/k8s/configmap.yaml", 'UCUDNN_START_TIMEOUT: "60s"', 'UCUDNN_START_TIMEOUT: "2m"'),
     r"startupProbe allows 90 s; the server may wait 120 s"),
    ("a named port in a gRPC probe",
     replace("deploy/k8s/server-deployment.yaml", "grpc: {port: 50051}", "grpc: {port: grpc}"),
     r"readinessProbe\.grpc\.port 'grpc' must be a number"),
    ("a misspelt Kubernetes field",
     replace("deploy/k8s/worker-daemonset.yaml", "terminationGracePeriodSeconds", "terminationGracePeriodSecond"),
     r"terminationGracePeriodSecond: no such field"),
    ("a number where Kubernetes wants a string",
     replace("deploy/k8s/configmap.yaml", 'UCUDNN_AUTO_MIGRATE: "0"', "UCUDNN_AUTO_MIGRATE: 0"),
     r"data\.UCUDNN_AUTO_MIGRATE: expected str, got int"),
    ("a required Kubernetes field missing",
     replace("deploy/k8s/server-service.yaml", "port: 9464, ", ""),
     r"schema: Invalid value for `port`, must not be `None`"),
    ("a field the Compose schema does not know",
     replace("deploy/compose/compose.yaml", "    stop_grace_period: 2m", "    stop_grace_period: 2m\n    gpus: all"),
     r"compose:services/worker: schema: .*'gpus'"),
    ("a migration Job named the same for every release",
     replace("deploy/k8s/migrate-job.yaml", "name: ucudnn-migrate-0-1-0", "name: ucudnn-migrate"),
     r"name it per release"),
    ("a migration Job kept forever",
     replace("deploy/k8s/migrate-job.yaml", "  ttlSecondsAfterFinished: 86400\n", ""),
     r"no spec\.ttlSecondsAfterFinished"),
    ("images of two releases",
     replace("deploy/k8s/worker-daemonset.yaml", "image: ucudnn:0.1.0", "image: ucudnn:0.2.0"),
     r"ucudnn images of different tags"),
    ("no sysusers file for User=ucudnn",
     remove("deploy/systemd/ucudnn.sysusers.conf"), r"User=ucudnn is not created by ucudnn\.sysusers\.conf"),
    ("a sysusers line systemd-sysusers rejects",
     replace("deploy/systemd/ucudnn.sysusers.conf", "\nu     ucudnn", "\nU     ucudnn"),
     r"systemd-sysusers --dry-run: .*Unknown command type"),
    ("a unit systemd-analyze rejects",
     replace("deploy/systemd/ucudnn-server.service", "RestartSec=2s", "RestartSec=two seconds"),
     r"ucudnn-server\.service.*(RestartSec|two seconds)"),
]


def make_tree(source, root):
    shutil.copytree(os.path.join(source, "deploy"), os.path.join(root, "deploy"))
    os.makedirs(os.path.join(root, "scripts"))
    shutil.copy(os.path.join(source, "scripts", "bundle.sh"), os.path.join(root, "scripts"))
    for f in (".gitignore", ".dockerignore"):
        shutil.copy(os.path.join(source, f), root)


def validate(root, bin_dir):
    r = subprocess.run([sys.executable, os.path.join(root, "deploy", "validate.py"),
                        "--bin-dir", bin_dir], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def run_case(source, bin_dir, case):
    name, mutate, expected = case
    with tempfile.TemporaryDirectory() as root:
        make_tree(source, root)
        if mutate:
            mutate(root)
        rc, out = validate(root, bin_dir)
    if mutate is None:
        return rc, out, rc in (0, 77)
    return rc, out, rc == 1 and re.search(expected, out) is not None


def main():
    source, bin_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    baseline = run_case(source, bin_dir, ("unchanged", None, None))
    if baseline[0] == 77:
        print(baseline[1])
        print("SKIP: validate.py skips a check here, so its cases cannot be judged")
        return 77
    failed = 0
    if not baseline[2]:
        print("FAIL unchanged deploy/ does not pass:\n" + baseline[1])
        failed += 1
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: run_case(source, bin_dir, c), CASES))
    for (name, _, expected), (rc, out, ok) in zip(CASES, results):
        if ok:
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: expected exit 1 and /{expected}/, got exit {rc}:\n{out}")
    print(f"{len(CASES) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
