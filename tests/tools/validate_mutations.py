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
    ("the optional PostgreSQL back in the base",
     replace("deploy/k8s/with-postgres/kustomization.yaml", "components:\n  - ../components/postgres\n", ""),
     r"no overlay \(k8s/\*/kustomization\.yaml\) adds component postgres"),
    ("a compose secret the server's UID cannot read",
     replace("deploy/compose/compose.yaml", 'uid: "65532"', 'uid: "0"'),
     r"compose:server: secret tokens: long syntax with uid/gid 65532"),
    ("server-only variable given to the worker",
     replace("deploy/k8s/configmap.yaml", '  UCUDNN_WORKER_BACKEND: "cudnn"',
             '  UCUDNN_WORKER_BACKEND: "cudnn"\n  UCUDNN_SCHEMA_WAIT: "1m"'),
     r"UCUDNN_SCHEMA_WAIT \(from ConfigMap ucudnn-worker-config\) is not read by ucudnn-worker; "
     r"ucudnn-server reads it"),
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
     replace("deploy/k8s/server-deployment.yaml", "failureThreshold: 132", "failureThreshold: 10"),
     r"startupProbe allows 50 s"),
    ("a start timeout longer than the startup probe allows",
     replace("deploy/k8s/configmap.yaml", 'UCUDNN_START_TIMEOUT: "60s"', 'UCUDNN_START_TIMEOUT: "20m"'),
     r"startupProbe allows 660 s; the server may wait 1200 s"),
    ("a schema wait longer than the startup probe allows",
     replace("deploy/k8s/configmap.yaml", 'UCUDNN_SCHEMA_WAIT: "10m"', 'UCUDNN_SCHEMA_WAIT: "30m"'),
     r"startupProbe allows 660 s; the server may wait 1800 s"),
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
     replace("deploy/compose/compose.yaml", "    secrets:\n      - source: tokens",
             "    gpus: all\n    secrets:\n      - source: tokens"),
     r"compose:services/server: schema: .*'gpus'"),
    ("a migration Job named the same for every release",
     replace("deploy/k8s/migrate-job.yaml", "name: ucudnn-migrate-0-1-0", "name: ucudnn-migrate"),
     r"name it per release"),
    ("a migration Job kept forever",
     replace("deploy/k8s/migrate-job.yaml", "  ttlSecondsAfterFinished: 86400\n", ""),
     r"no spec\.ttlSecondsAfterFinished"),
    ("images of two releases",
     replace("deploy/k8s/worker-daemonset.yaml", "image: ucudnn:0.1.0", "image: ucudnn:0.2.0"),
     r"ucudnn images of different tags"),
    # Kubernetes hardening and secrets (issue 14).
    ("no kustomization", remove("deploy/k8s/kustomization.yaml"), r"kustomization\.yaml: missing"),
    ("the Namespace not first",
     replace("deploy/k8s/kustomization.yaml", "  - namespace.yaml\n  - configmap.yaml",
             "  - configmap.yaml\n  - namespace.yaml"),
     r"the Namespace \(namespace\.yaml\) must come first"),
    ("a manifest the kustomization leaves out",
     replace("deploy/k8s/kustomization.yaml", "  - server-pdb.yaml\n", ""),
     r"resources does not list server-pdb\.yaml"),
    ("a committed Secret",
     lambda root: open(os.path.join(root, "deploy/k8s/secret.yaml"), "w").write(
         "apiVersion: v1\nkind: Secret\nmetadata: {name: x, namespace: ucudnn}\n"
         "stringData: {password: change-me}\n"),
     r"a committed Secret"),
    ("secrets not ignored by git", remove("deploy/k8s/secrets/.gitignore"),
     r"secrets/\.gitignore: missing"),
    ("no PodDisruptionBudget for the server replicas", chain(
        remove("deploy/k8s/server-pdb.yaml"),
        replace("deploy/k8s/kustomization.yaml", "  - server-pdb.yaml\n", "")),
     r"several replicas but no PodDisruptionBudget"),
    ("a worker without probes",
     replace("deploy/k8s/worker-daemonset.yaml", "          livenessProbe:", "          # livenessProbe:"),
     r"worker: no livenessProbe"),
    ("capabilities kept",
     replace("deploy/k8s/worker-daemonset.yaml", "capabilities: {drop: [ALL]}", "capabilities: {drop: [NET_RAW]}"),
     r"worker: securityContext\.capabilities\.drop must include ALL"),
    ("no seccomp profile",
     replace("deploy/k8s/migrate-job.yaml", "        seccompProfile: {type: RuntimeDefault}\n", ""),
     r"seccompProfile\.type must be RuntimeDefault"),
    ("a service account token mounted",
     replace("deploy/k8s/server-deployment.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true"),
     r"automountServiceAccountToken must be false"),
    ("a floating PostgreSQL tag",
     replace("deploy/k8s/components/postgres/postgres-statefulset.yaml", "image: postgres:15.10", "image: postgres:15"),
     r"image postgres:15 is not pinned"),
    ("PostgreSQL without resources",
     replace("deploy/k8s/components/postgres/postgres-statefulset.yaml", "            requests: {cpu: 250m, memory: 512Mi}\n", ""),
     r"postgres: resources need requests"),
    ("tokens as an environment variable",
     replace("deploy/k8s/configmap.yaml", '  UCUDNN_TOKEN_FILE: "/etc/ucudnn/tokens/tokens"',
             '  UCUDNN_TOKENS: "change-me"'),
     r"UCUDNN_TOKENS: tokens belong in a mounted file"),
    ("a token file not mounted",
     replace("deploy/k8s/server-deployment.yaml", "mountPath: /etc/ucudnn/tokens", "mountPath: /etc/elsewhere"),
     r"UCUDNN_TOKEN_FILE /etc/ucudnn/tokens/tokens is not in a mounted Secret volume"),
    ("a token on a container's command line",
     replace("deploy/k8s/server-deployment.yaml", 'command: ["/opt/ucudnn/bin/ucudnn-server"]',
             'command: ["/opt/ucudnn/bin/ucudnn-server", "--tokens", "abc"]'),
     r"--tokens puts a token on the command line"),
    ("a password in a unit's command line",
     replace("deploy/systemd/ucudnn-worker.service", "ExecStart=/opt/ucudnn/bin/ucudnn-worker",
             "ExecStart=/opt/ucudnn/bin/ucudnn-worker --database-url postgresql://u:pw@db/x"),
     r"ucudnn-worker\.service: --database-url with a password"),
    ("a password in a database URL",
     replace("deploy/k8s/configmap.yaml", "postgresql://ucudnn@ucudnn-postgres", "postgresql://ucudnn:pw@ucudnn-postgres"),
     r"UCUDNN_DATABASE_URL embeds a password"),
    ("a token on a script's command line",
     replace("scripts/demo.sh", '--token-file "$run_dir/token"', '--tokens "$(cat "$run_dir/token")"'),
     r"scripts/demo\.sh:[0-9]+: --tokens puts a token on the command line"),
    # Compose and Dockerfile (issue 14).
    ("a default database password in compose",
     replace("deploy/compose/compose.yaml", "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (in deploy/compose/.env)}",
             "${POSTGRES_PASSWORD:-ucudnn}"),
     r"compose:POSTGRES_PASSWORD: a secret with a default value"),
    ("a compose service without a healthcheck",
     replace("deploy/compose/compose.yaml", '      test: ["CMD", "/opt/ucudnn/bin/ucudnn", "health"',
             '      tst: ["CMD", "/opt/ucudnn/bin/ucudnn", "health"'),
     r"compose:server: no healthcheck"),
    ("the Dockerfile copies the sources before installing packages",
     replace("deploy/docker/Dockerfile", "COPY scripts/lib.sh /src/scripts/lib.sh\n", "COPY . /src\n"),
     r"install the packages .* before `COPY \. `"),
    ("the image builds the tests",
     replace("deploy/docker/Dockerfile", " -DUCUDNN_BUILD_TESTS=OFF", ""),
     r"does not configure with -DUCUDNN_BUILD_TESTS=OFF"),
    ("the image has no HEALTHCHECK",
     replace("deploy/docker/Dockerfile", "HEALTHCHECK --interval", "# HEALTHCHECK --interval"),
     r"no HEALTHCHECK"),
    ("the image's user is not the manifests'",
     replace("deploy/docker/Dockerfile", "--uid 65532", "--uid 1000"),
     r"is not the manifests' runAsUser"),
    ("an unpinned base image",
     replace("deploy/docker/Dockerfile", "ARG CUDA_BASE=debian:12.8", "ARG CUDA_BASE=debian:12"),
     r"base image debian:12 is not pinned"),
    # Monitoring (issue 14).
    ("an alert on a metric nobody exports",
     replace("deploy/monitoring/alerts.yaml", "expr: ucudnn_database_up == 0", "expr: ucudnn_databse_up == 0"),
     r"ucudnn_databse_up is not a metric of the server or the worker"),
    ("a dashboard query on a metric nobody exports",
     replace("deploy/monitoring/grafana-dashboard.json", "ucudnn_worker_configurations_measured_total",
             "ucudnn_worker_configs_total"),
     r"grafana-dashboard\.json:Configurations measured: ucudnn_worker_configs_total is not a metric"),
    ("a dashboard that is not JSON",
     replace("deploy/monitoring/grafana-dashboard.json", '"title": "ucudnn"', '"title": ucudnn'),
     r"JSON does not parse"),
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
    shutil.copy(os.path.join(source, "scripts", "demo.sh"), os.path.join(root, "scripts"))
    for metrics in ("server/src/server_metrics.cc", "worker/src/worker_metrics.cc"):
        os.makedirs(os.path.dirname(os.path.join(root, metrics)), exist_ok=True)
        shutil.copy(os.path.join(source, metrics), os.path.join(root, metrics))
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
