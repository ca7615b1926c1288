"""The endpoint table is the only place a route is declared: every handler function is in
it exactly once, and the app serves exactly its paths and methods."""

from __future__ import annotations

import inspect

from starlette.routing import Route

from cassini.service import contract, handlers
from cassini.service.app import create_app
from cassini.service.config import ServiceConfig


def test_every_handler_is_in_the_table_once():
    public = {
        name
        for name, fn in vars(handlers).items()
        if inspect.iscoroutinefunction(fn) and not name.startswith("_")
        and fn.__module__ == handlers.__name__
    }
    used = [op.handler.__name__ for ep in contract.ENDPOINTS for op in ep.operations]
    assert sorted(used) == sorted(public)


def test_app_routes_are_the_table():
    app = create_app(ServiceConfig(workers=1))
    served = {
        (r.path, m) for r in app.routes if isinstance(r, Route) for m in (r.methods or ())
    }
    declared = {(ep.path, m) for ep in contract.ENDPOINTS for m in ep.allowed_methods()}
    assert served == declared
