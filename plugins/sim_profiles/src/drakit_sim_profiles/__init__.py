"""drakit's reference simulated machines: GPUs and NICs of several vendors in one box.

Backends never import each other, and core knows no vendor, so the machines that combine
NVIDIA or AMD GPUs with AMD AINICs or Mellanox ConnectX-7 NICs live in this small distribution,
which depends on the backends whose parts it uses and registers every machine in the
``drakit.profiles`` entry point group (see ``docs/simulated-hardware.md``), and the
selections that run when nothing is configured (the ``drakit.presets`` group:
:mod:`drakit_sim_profiles.presets`). It is simulation only: the node image does not ship it.

This package imports nothing itself: reading a preset must not build the simulator. The
machines are in :mod:`drakit_sim_profiles.profiles`.
"""
