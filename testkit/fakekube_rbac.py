"""Users and RBAC for the fake API server (testkit/fakekube.py).

``--flat-network`` reads a Link's credentials Secret from the local cluster and then
watches the remote cluster as the Secret's service account, which Linkerd's
remote-access ClusterRole restricts to a few resources (no Secrets, no Links). A test
that wants to catch dnsside reading something that account may not read needs an API
server that authenticates several bearer tokens as different users and answers each
request the way RBAC would: 403 with the real message when no rule grants it.

The model is RBAC's, cut down to what a read-only server needs: a user's rules are the
union of what it is granted (there are no deny rules); a :class:`Rule` names an API
group, a resource, verbs, optionally one namespace (a Role bound in that namespace) and
optionally resourceNames (which only ever grant ``get`` of those objects: a list or watch
has no name). Users that were never restricted may do everything, which keeps the fake's
default (one token, user ``admin``) as it was.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

READ_VERBS = frozenset({"get", "list", "watch"})


@dataclass(frozen=True)
class Access:
    """What one request asks for, in RBAC's terms (the attributes an authorizer sees)."""

    verb: str  # get, list or watch (the fake serves nothing else)
    group: str  # "" for the core group
    plural: str
    namespace: str | None = None  # None: a cluster-wide list or watch
    name: str | None = None  # set for a get of one object


@dataclass(frozen=True)
class Rule:
    """One grant: a PolicyRule of a ClusterRole (``namespace`` None) or of a Role bound in
    ``namespace``. ``verbs`` and ``resource_names`` are frozensets (hashable, so a Rule is);
    a list given at run time is converted rather than kept mutable."""

    plural: str
    group: str = ""
    verbs: frozenset[str] = READ_VERBS
    namespace: str | None = None
    resource_names: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # frozen: normalise through object.__setattr__.
        object.__setattr__(self, "verbs", frozenset(self.verbs))
        object.__setattr__(self, "resource_names", frozenset(self.resource_names))

    def grants(self, access: Access) -> bool:
        """Whether this rule allows ``access``, as the RBAC authorizer decides it."""
        if access.verb not in self.verbs and "*" not in self.verbs:
            return False
        if access.plural != self.plural or access.group != self.group:
            return False
        if self.namespace is not None and access.namespace != self.namespace:
            return False  # a Role grants nothing cluster-wide, nor in other namespaces
        if self.resource_names:
            return access.name is not None and access.name in self.resource_names
        return True


# What Linkerd's remote-access ClusterRole grants the service account whose token a Link's
# credentials Secret holds (linkerd2 multicluster/charts/linkerd-multicluster/templates/
# remote-access-service-mirror-rbac.yaml, since stable-2.14). Nothing on Secrets or Links.
REMOTE_ACCESS_RULES: tuple[Rule, ...] = (
    Rule("replicasets", "apps"),
    Rule("jobs", "batch"),
    Rule("pods"),
    Rule("endpoints"),
    Rule("services"),
    Rule("endpointslices", "discovery.k8s.io"),
    Rule("servers", "policy.linkerd.io"),
    Rule("configmaps", verbs=frozenset({"get"}), resource_names=frozenset({"linkerd-config"})),
    Rule("events", verbs=frozenset({"create", "patch"})),
)

# The same ClusterRole before Linkerd 2.14 (stable-2.13.7): Services and Endpoints only,
# no EndpointSlices (nor pods, replicasets, jobs or servers).
REMOTE_ACCESS_RULES_PRE_214: tuple[Rule, ...] = (
    Rule("services"),
    Rule("endpoints"),
    Rule("configmaps", verbs=frozenset({"get"}), resource_names=frozenset({"linkerd-config"})),
    Rule("events", verbs=frozenset({"create", "patch"})),
)


def forbidden_message(user: str, access: Access) -> str:
    """The message of the API server's 403 for ``access``, word for word, e.g.
    ``secrets is forbidden: User "u" cannot list resource "secrets" in API group "" in the
    namespace "linkerd-multicluster"`` (clients and `dnsside check` show it verbatim)."""
    resource = f"{access.plural}.{access.group}" if access.group else access.plural
    subject = f'{resource} "{access.name}"' if access.name else resource
    scope = (f'in the namespace "{access.namespace}"' if access.namespace
             else "at the cluster scope")
    return (f'{subject} is forbidden: User "{user}" cannot {access.verb} resource '
            f'"{access.plural}" in API group "{access.group}" {scope}')


def impersonation_message(user: str, target: str) -> str:
    """The 403 of a user without the ``impersonate`` verb sending Impersonate-User."""
    return (f'users "{target}" is forbidden: User "{user}" cannot impersonate resource '
            f'"users" in API group "" at the cluster scope')


@dataclass
class Users:
    """Bearer tokens and the users they authenticate as, and per-user allow-lists."""

    tokens: dict[str, str] = field(default_factory=dict)  # token -> user
    # user -> rules; a user absent here is unrestricted (the fake's historical default).
    rules: dict[str, tuple[Rule, ...]] = field(default_factory=dict)

    def add_token(self, token: str, user: str) -> None:
        self.tokens[token] = user

    def authenticate(self, authorization: str | None, default_token: str | None,
                     default_user: str) -> str | None:
        """The user a request's Authorization header authenticates as; None means 401.
        ``default_token`` (None: requests without a known token are accepted) is the
        fake's historical single token, authenticating as ``default_user``."""
        if authorization and authorization.startswith("Bearer "):
            user = self.tokens.get(authorization[len("Bearer "):])
            if user is not None:
                return user
        if default_token is None or authorization == f"Bearer {default_token}":
            return default_user
        return None

    def restrict(self, user: str, rules: Iterable[Rule]) -> None:
        self.rules[user] = tuple(rules)

    def unrestrict(self, user: str) -> None:
        self.rules.pop(user, None)

    def restricted(self, user: str) -> bool:
        return user in self.rules

    def allows(self, user: str, access: Access) -> bool:
        rules = self.rules.get(user)
        return rules is None or any(rule.grants(access) for rule in rules)
