"""``cassini serve --kube`` and ``cassini cluster``: the cluster model from what a
Kubernetes cluster already publishes (Kueue ``Topology``, Volcano ``HyperNode`` objects or
node labels), running jobs from Pods, and a scheduler-plugins ``NetworkTopology``.

:mod:`.topology` and :mod:`.pods` are pure (Kubernetes JSON in, the service's model out);
:mod:`.client`, :mod:`.watch`, :mod:`.sync` and :mod:`.publish` talk to the API server with
the official ``kubernetes`` client (the ``[kube]`` extra)."""
