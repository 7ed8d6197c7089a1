"""Enforcement through the container runtime (NRI): the claims' effects inside containers.

``index`` (what every driver holds, by CDI name), ``guard`` (the fail-closed CDI mount) and
``state`` (what ``/readyz`` reports) import nothing of NRI, so a node without ``nri.enabled``
never loads it; ``views`` (the runtime's pods and containers as hook views), ``merge``
(answers into one cpuset, NRI adjustments and updates; pure) and ``enforcer`` (the NRI event
handlers inside ``drakit node``) do. See docs/nri.md.
"""
