#!/usr/bin/env python3
"""Validate deploy/k8s/*.yaml against the Kubernetes OpenAPI schemas (PyPI kubernetes-validate,
installed by scripts/setup.sh into $EFABENCH_DEPS/venv), strictly: unknown fields are errors.

Kinds the schemas do not have (the Kubeflow MPIJob custom resource) are checked as far as they
can be: the top-level fields the MPI Operator's v2beta1 API requires, and every pod template
inside it, validated as a core/v1 PodTemplate. Exit 0 when everything validates, 1 otherwise.

Usage: python3 scripts/validate-k8s.py [FILE.yaml ...]   (default: deploy/k8s/*.yaml)
"""
import glob
import os
import sys

import kubernetes_validate
import yaml

VERSION = os.environ.get("K8S_VERSION", "1.31.0")


def check(name, doc):
    try:
        kubernetes_validate.validate(doc, VERSION, strict=True)
        print(f"ok    {name}: {doc['kind']} {doc['metadata']['name']} (Kubernetes {VERSION} schema)")
        return True
    except kubernetes_validate.SchemaNotFoundError:
        return None
    except kubernetes_validate.ValidationError as e:
        path = "/".join(str(p) for p in e.path)
        print(f"FAIL  {name}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}: {path}: {e.message}")
        return False


def check_mpijob(name, doc):
    ok = True
    spec = doc.get("spec", {})
    problems = []
    if doc.get("apiVersion") != "kubeflow.org/v2beta1":
        problems.append(f"apiVersion {doc.get('apiVersion')!r}, expected kubeflow.org/v2beta1")
    specs = spec.get("mpiReplicaSpecs", {})
    if set(specs) != {"Launcher", "Worker"}:
        problems.append(f"mpiReplicaSpecs has {sorted(specs)}, expected Launcher and Worker")
    if not isinstance(spec.get("slotsPerWorker", 1), int):
        problems.append("slotsPerWorker is not an integer")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        problems.append(f"mpiImplementation {spec.get('mpiImplementation')!r}")
    for role, rs in specs.items():
        if not isinstance(rs.get("replicas", 1), int):
            problems.append(f"{role}.replicas is not an integer")
        pt = {"apiVersion": "v1", "kind": "PodTemplate",
              "metadata": {"name": f"{doc['metadata']['name']}-{role.lower()}"},
              "template": rs.get("template", {})}
        r = check(f"{name} ({role} pod template)", pt)
        ok = ok and bool(r)
    for p in problems:
        print(f"FAIL  {name}: MPIJob {doc['metadata']['name']}: {p}")
    if not problems:
        print(f"ok    {name}: MPIJob {doc['metadata']['name']}: v2beta1 fields (no schema for this custom resource; its pod templates are validated above)")
    return ok and not problems


def main():
    files = sys.argv[1:] or sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "deploy", "k8s", "*.yaml")))
    if not files:
        print("validate-k8s: no manifests found", file=sys.stderr)
        return 2
    good = True
    for f in files:
        name = os.path.relpath(f)
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        for d in docs:
            r = check(name, d)
            if r is None:
                if d.get("kind") == "MPIJob":
                    r = check_mpijob(name, d)
                else:
                    print(f"FAIL  {name}: no schema for {d.get('apiVersion')} {d.get('kind')}")
                    r = False
            good = good and r
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
