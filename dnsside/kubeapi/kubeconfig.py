"""The parts of kubernetes-asyncio dnsside uses, without the generated API it never calls.

dnsside needs four things from kubernetes-asyncio: ``Configuration``, ``ApiClient``
(for ``call_api``: authentication, TLS, proxies) and the kubeconfig and in-cluster
loaders. But ``import kubernetes_asyncio`` (or any module under it) first runs
the package's ``__init__``, which imports every generated API and model class:
about a thousand classes that cost tens of MB of resident memory and a large
part of the start-up (bench/memory-figures.md), for nothing.

So :func:`load` registers ``kubernetes_asyncio``, ``kubernetes_asyncio.client``
and ``kubernetes_asyncio.client.models`` as *lazy* packages: module objects made
from their real import specs but not executed yet. Their submodules import as
usual (the import system only needs a parent's ``__path__``); the first time
anything asks one of those packages for a name it does not have, its real
``__init__`` runs, so nothing that uses the full library in the same process
can tell the difference. If the installed version does not lay out its modules
as expected, or kubernetes-asyncio was already imported, the plain import is
used.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_LAZY = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


class _LazyPackage(types.ModuleType):
    """A package whose ``__init__`` runs on the first lookup of a name it lacks that is
    not one of its submodules (``from package import submodule`` looks the name up
    first: that must import the submodule alone)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        submodule = f"{self.__name__}.{name}"
        if importlib.util.find_spec(submodule) is not None:
            return importlib.import_module(submodule)
        spec = self.__dict__.pop("_dnsside_pending", None)
        if spec is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        spec.loader.exec_module(self)
        return getattr(self, name)


def _register_lazy() -> None:
    for name in _LAZY:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not a package")
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _LazyPackage
        module.__dict__["_dnsside_pending"] = spec
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def load() -> dict[str, Any]:
    """ApiClient, Configuration, ConfigException, load_kube_config,
    load_kube_config_from_dict, load_incluster_config and refresh_token, by name."""
    if "kubernetes_asyncio" not in sys.modules:
        try:
            _register_lazy()
            configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
            api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
            client = sys.modules["kubernetes_asyncio.client"]
            # The config loaders do `from kubernetes_asyncio.client import ApiClient,
            # Configuration`: give the lazy package those two names up front.
            client.__dict__.setdefault("Configuration", configuration.Configuration)
            client.__dict__.setdefault("ApiClient", api_client.ApiClient)
            return _names()
        except ImportError:
            for name in [n for n in sys.modules if n.split(".")[0] == "kubernetes_asyncio"]:
                del sys.modules[name]
    return _names()


def _names() -> dict[str, Any]:
    from kubernetes_asyncio.client.api_client import ApiClient
    from kubernetes_asyncio.client.configuration import Configuration
    from kubernetes_asyncio.config import (
        ConfigException,
        load_incluster_config,
        load_kube_config,
        load_kube_config_from_dict,
        refresh_token,
    )

    return {"ApiClient": ApiClient, "Configuration": Configuration,
            "ConfigException": ConfigException, "load_kube_config": load_kube_config,
            "load_kube_config_from_dict": load_kube_config_from_dict,
            "load_incluster_config": load_incluster_config, "refresh_token": refresh_token}
