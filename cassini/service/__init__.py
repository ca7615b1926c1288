"""``cassini serve``: the advisor as an HTTP service and a kube-scheduler extender.

Modules: :mod:`~cassini.service.contract` (the endpoint table),
:mod:`~cassini.service.handlers` (one function per operation),
:mod:`~cassini.service.app` (Starlette routes, exception handlers),
:mod:`~cassini.service.reading` (query options, JSON bodies),
:mod:`~cassini.service.metrics` (metrics middleware), :mod:`~cassini.service.openapi`,
:mod:`~cassini.service.service` and :mod:`~cassini.service.registry` (shared state),
:mod:`~cassini.service.pool` and :mod:`~cassini.service.tasks` (worker processes),
:mod:`~cassini.service.cluster`, :mod:`~cassini.service.scoring`,
:mod:`~cassini.service.shifts` (the cluster and the computations on it),
:mod:`~cassini.service.k8s` (the extender's wire format), :mod:`~cassini.service.cli`
(options, uvicorn, signals).  Importing this package imports no HTTP library;
:func:`cassini.service.app.create_app` does.
"""
