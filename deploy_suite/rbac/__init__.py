"""The least-privilege identity the harness needs, shipped as manifests an admin applies.

``role.yaml`` (a ServiceAccount, the namespace-scoped Role and its RoleBinding: required) and
``clusterrole.yaml`` (read-only cluster-scope reads that improve verdicts: optional) live beside
this module as package data, so ``deploy-suite rbac`` prints them after a pip install. Both are
templates in envsubst's syntax (``${NAMESPACE}``, ``${SUBJECT_NAME}``). docs/security.md says what
each rule is for; :func:`allows` matches a request against rules as the apiserver's RBAC
authorizer does, for the tests that prove the rules complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from importlib import resources
from string import Template

from deploy_suite import yamlio
from deploy_suite.constants import Obj
from deploy_suite.errors import InputError

ROLE_FILE = "role.yaml"
CLUSTER_ROLE_FILE = "clusterrole.yaml"
DEFAULT_SUBJECT = "deploy-suite"
_SA_SUBJECT = "- kind: ServiceAccount\n  name: ${SUBJECT_NAME}\n  namespace: ${NAMESPACE}\n"
_USER_SUBJECT = "- kind: User\n  apiGroup: rbac.authorization.k8s.io\n  name: ${SUBJECT_NAME}\n"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def template(name: str) -> str:
    """One shipped manifest as written (``ROLE_FILE`` or ``CLUSTER_ROLE_FILE``)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def render(namespace: str, subject: str = DEFAULT_SUBJECT, *, user: bool = False, cluster: bool = False) -> str:
    """The manifests for one namespace and subject, ready for ``kubectl apply -f -``: the Role (with
    the ServiceAccount unless ``user``), and the optional ClusterRole when ``cluster``."""
    if not _DNS_LABEL.fullmatch(namespace):
        raise InputError("--namespace", f"{namespace!r} is not a namespace name (a DNS-1123 label)",
                         "name the workload's kubernetes.namespace")
    if not subject or (not user and not _DNS_LABEL.fullmatch(subject)):
        raise InputError("--service-account", f"{subject!r} is not a ServiceAccount name (a DNS-1123 label)",
                         "name a ServiceAccount, or pass --user NAME for a user the cluster authenticates")
    texts = [template(ROLE_FILE)] + ([template(CLUSTER_ROLE_FILE)] if cluster else [])
    out = []
    for text in texts:
        subjects = text.replace(_SA_SUBJECT, _USER_SUBJECT) if user else text
        out.append(Template(subjects).substitute(NAMESPACE=namespace, SUBJECT_NAME=subject))
    docs = "---\n".join(out)
    if not user:
        account = (f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {subject}\n  namespace: {namespace}\n"
                   "  labels: {app.kubernetes.io/name: deploy-suite}\n")
        docs = account + "---\n" + docs
    return docs


def rules(name: str) -> list[Obj]:
    """The rules of the Role (``ROLE_FILE``) or the ClusterRole (``CLUSTER_ROLE_FILE``)."""
    text = Template(template(name)).substitute(NAMESPACE="ns", SUBJECT_NAME=DEFAULT_SUBJECT)
    docs = yamlio.load_yaml_text(text, name, "reinstall deploy-suite")
    role = next(d for d in docs if d.get("kind") in {"Role", "ClusterRole"})
    return [dict(r) for r in role["rules"]]


def _has(values: Iterable[str], wanted: str) -> bool:
    values = list(values)
    return "*" in values or wanted in values


def allows(rule_list: Sequence[Obj], verb: str, group: str, resource: str, name: str | None = None) -> bool:
    """Whether ``rule_list`` grants ``verb`` on ``resource`` (``pods/log`` for a subresource) of API
    ``group`` (``""`` the core group), as the RBAC authorizer matches resource rules: a rule with
    ``resourceNames`` grants only requests naming one of them (so never a list)."""
    for rule in rule_list:
        names = rule.get("resourceNames") or []
        if (_has(rule.get("verbs") or [], verb) and _has(rule.get("apiGroups") or [], group)
                and _has(rule.get("resources") or [], resource) and (not names or name in names)):
            return True
    return False
