"""The cluster simulator (``cassini sim``): workloads placed and run on a simulated
cluster under schedulers composed of parts."""
