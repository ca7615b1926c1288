"""``cassini serve``: the advisor as an HTTP service and a kube-scheduler extender.

Modules: :mod:`~cassini.service.pool` (worker processes that can be killed),
:mod:`~cassini.service.app` (the Starlette app: one request path, metrics, the job
registry), :mod:`~cassini.service.contract` (endpoints, query options, OpenAPI),
:mod:`~cassini.service.k8s` (the extender's wire format),
:mod:`~cassini.service.cluster` (cluster file, node scores, time-shifts),
:mod:`~cassini.service.cli` (options, uvicorn, signals).  Importing this package imports
no HTTP library; :func:`cassini.service.app.create_app` does.
"""
