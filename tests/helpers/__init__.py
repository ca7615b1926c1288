"""Shared test utilities (not tests): gloo process groups (``gloo_util``), a ``cassini
serve`` process and HTTP calls (``service_util``), MLTCP namespace pairs and flows
(``mltcp_flows``), the window-fault investigation script (``mltcp_window_fault``, also run
by hand: ``sudo .venv/bin/python tests/helpers/mltcp_window_fault.py ...``) and the shipped
examples' pinned answers (``pinned``), the network model's oracles
(``sim_oracle``).  Fixtures live in ``tests/conftest.py``."""
