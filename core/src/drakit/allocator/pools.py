"""Which pools and devices a node can use, in the order kube-scheduler tries them.

As ``GatherPools`` in ``k8s.io/dynamic-resource-allocation/structured`` (1.37): slices that
target the node (``nodeName``, ``allNodes``, a matching ``nodeSelector``, or one matching device
under ``perDeviceNodeSelection``); per pool only the highest generation; a pool with fewer slices
than ``resourceSliceCount`` is incomplete, one with duplicate device names or dangling counter
references is invalid (neither is allocated from). Pools are sorted by driver and pool name,
slices by name, and pools holding devices with binding conditions go last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from drakit.allocator.api import Device, Node, NodeSelector, NodeSelectorRequirement, ResourceSlice
from drakit.allocator.cel import DeviceEnv, Selector
from drakit.allocator.quantity import parse_quantity

__all__ = ["Candidate", "DeviceID", "Pool", "gather_pools", "node_matches"]

DeviceID = tuple[str, str, str]
"""``(driver, pool, device)``."""


def _whole(value: Fraction) -> Fraction | int:
    return value.numerator if value.denominator == 1 else value


@dataclass(eq=False)
class Candidate:
    """A device the node can use, where it sits in the search order."""

    id: DeviceID
    device: Device
    slice: ResourceSlice
    pool: Pool
    _env: DeviceEnv | None = None
    _draws: tuple[tuple[str, str, Fraction | int], ...] | None = None
    _matched: dict[Selector, bool] | None = None

    @property
    def draws(self) -> tuple[tuple[str, str, Fraction | int], ...]:
        """``(counter set, counter, amount)`` for each counter the device consumes.

        Whole amounts are ``int`` (exact as well, and adding them is many times cheaper).
        """
        if self._draws is None:
            self._draws = tuple(
                (use.counter_set, name, _whole(parse_quantity(c.value)))
                for use in self.device.consumes_counters
                for name, c in use.counters.items()
            )
        return self._draws

    @property
    def env(self) -> DeviceEnv:
        """Its CEL environment (built on first use)."""
        if self._env is None:
            self._env = DeviceEnv.of(self.id[0], self.device)
        return self._env

    def matches(self, selector: Selector) -> bool:
        """Whether ``selector`` holds for this device (see :meth:`Selector.matches`)."""
        if selector.driver_only is not None:
            return self.id[0] == selector.driver_only
        done = self._matched
        if done is None:
            done = self._matched = {}
        result = done.get(selector)
        if result is None:  # a search asks again for every tier, every reason, every retry
            result = done[selector] = selector.matches_device(
                self.id[0], self.device, self._get_env
            )
        return result

    def _get_env(self) -> DeviceEnv:
        return self.env

    def __str__(self) -> str:
        return self.id[2] if self.id[1] == self.pool.node_pool else "/".join(self.id[1:])


@dataclass(eq=False)
class Pool:
    """One pool as the allocator sees it on one node."""

    driver: str
    name: str
    incomplete: bool = False
    invalid: str = ""
    slices: list[ResourceSlice] = field(default_factory=list)
    other_slices: list[ResourceSlice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Fraction]] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    node_pool: str = ""

    @property
    def id(self) -> str:
        """``driver/pool``."""
        return f"{self.driver}/{self.name}"

    def all_devices(self) -> list[tuple[DeviceID, Device]]:
        """Devices of the pool's slices, targeting the node or not."""
        return [
            ((self.driver, self.name, d.name), d)
            for s in (*self.slices, *self.other_slices)
            for d in s.spec.devices
        ]


def _requirement(req: NodeSelectorRequirement, values: dict[str, str]) -> bool:  # noqa: PLR0911
    present = req.key in values
    value = values.get(req.key, "")
    op = req.operator
    if op == "In":
        return present and value in req.values
    if op == "NotIn":
        return not present or value not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present or len(req.values) != 1:
        return False
    try:
        have, want = int(value), int(req.values[0])
    except ValueError:
        return False
    return have > want if op == "Gt" else have < want


def selector_matches(selector: NodeSelector, node: Node) -> bool:
    """Whether ``node`` satisfies ``selector`` (terms ORed, requirements ANDed)."""
    fields = {"metadata.name": node.name}
    for term in selector.node_selector_terms:
        if not term.match_expressions and not term.match_fields:
            continue  # an empty term matches nothing
        if all(_requirement(r, node.metadata.labels) for r in term.match_expressions) and all(
            _requirement(r, fields) for r in term.match_fields
        ):
            return True
    return False


def node_matches(
    node: Node, node_name: str | None, all_nodes: bool | None, selector: NodeSelector | None
) -> bool:
    """``NodeMatches``: by name, for all nodes, or by selector."""
    if node_name:
        return node.name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return selector_matches(selector, node)
    return False


def _relevant(s: ResourceSlice, node: Node) -> bool | None:
    spec = s.spec
    if spec.node_name or spec.all_nodes or spec.node_selector is not None:
        return node_matches(node, spec.node_name, spec.all_nodes, spec.node_selector)
    if spec.per_device_node_selection:
        return any(
            node_matches(node, d.node_name, d.all_nodes, d.node_selector) for d in spec.devices
        )
    return None  # a future node-selection field: not understood, skipped


def gather_pools(slices: Sequence[ResourceSlice], node: Node) -> list[Pool]:
    """The pools ``node`` can allocate from, in search order."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        if not _relevant(s, node):
            continue
        key = (s.spec.driver, s.spec.pool.name)
        have = by_pool.get(key)
        if have is None or s.spec.pool.generation > have[0].spec.pool.generation:
            by_pool[key] = [s]
        elif s.spec.pool.generation == have[0].spec.pool.generation:
            have.append(s)
    plain: list[Pool] = []
    binding: list[Pool] = []
    for (driver, name), members in by_pool.items():
        generation = members[0].spec.pool.generation
        want = members[0].spec.pool.resource_slice_count
        every = members
        if len(members) != want:
            same_pool = [s for s in slices if (s.spec.driver, s.spec.pool.name) == (driver, name)]
            if any(s.spec.pool.generation > generation for s in same_pool):
                continue  # the driver is replacing this generation: ignore it
            every = [s for s in same_pool if s.spec.pool.generation == generation]
            if len(every) != want:
                plain.append(Pool(driver, name, incomplete=True, node_pool=node.name))
                continue
        pool = _build(driver, name, members, every, node)
        if any(d.binding_conditions is not None for s in pool.slices for d in s.spec.devices):
            binding.append(pool)
        else:
            plain.append(pool)
    plain.sort(key=lambda p: (p.driver, p.name))
    binding.sort(key=lambda p: (p.driver, p.name))
    return plain + binding


def _build(
    driver: str,
    name: str,
    members: list[ResourceSlice],
    every: list[ResourceSlice],
    node: Node,
) -> Pool:
    pool = Pool(driver, name, node_pool=node.name)
    members = sorted(members, key=lambda s: s.metadata.name)
    targeting = {id(s) for s in members}
    counter_slices = [s for s in every if s.spec.shared_counters]
    pool.slices = [s for s in members if not s.spec.shared_counters]
    pool.other_slices = [s for s in every if id(s) not in targeting and not s.spec.shared_counters]
    names: set[str] = set()
    for s in pool.slices:
        for d in s.spec.devices:
            if d.name in names:
                pool.invalid = f"duplicate device name {d.name}"
                return pool
            names.add(d.name)
    for s in counter_slices:
        for cs in s.spec.shared_counters:
            if cs.name in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {cs.name}"
                return pool
            pool.counter_sets[cs.name] = {
                k: parse_quantity(c.value) for k, c in cs.counters.items()
            }
    for s in (*pool.slices, *pool.other_slices):
        for d in s.spec.devices:
            for use in d.consumes_counters:
                have = pool.counter_sets.get(use.counter_set)
                if have is None:
                    pool.invalid = f"counter set {use.counter_set} not found"
                    return pool
                for counter in use.counters:
                    if counter not in have:
                        pool.invalid = (
                            f"counter {counter} not found in counter set {use.counter_set}"
                        )
                        return pool
    pool.candidates = [
        Candidate((driver, name, d.name), d, s, pool) for s in pool.slices for d in s.spec.devices
    ]
    return pool
