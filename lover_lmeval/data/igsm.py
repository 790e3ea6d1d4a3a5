"""iGSM-style synthetic grade-school math problems, written from the description in
Ye et al. 2024, "Physics of Language Models: Part 2.1".

A problem lives in one hierarchy of category families (e.g. Zoos > Enclosures > Animals >
Body Parts). Items of adjacent layers are joined by edges; each edge (a, b) is an
*instance parameter* "each a's b", stated in the text either as a constant or as an
expression of other parameters. *Abstract parameters* ("the total number of Body Parts
in each Riverview Zoo") are never stated: they follow from the structure as a sum over
paths. All arithmetic is mod 23; as in the paper the text does not say so, so a prompt
for models not trained on iGSM should. The question asks for one parameter; the solution
computes exactly the parameters it needs, in dependency order, one step each:
"Define Parrot's Beak as c; so c = 3 + e = 3 + 6 = 9." Its n_op counts the +, - and *
in the symbolic part of every step (the part right after "c = ").
"""

import json
import random
import string
from dataclasses import dataclass
from typing import NamedTuple

from ..core.files import write_text
from .igsm_names import HIERARCHIES

MOD = 23
MAX_PERM_LEVEL = 5
MAX_DETAIL_LEVEL = 10
MAX_SUPPORTED_OP = 24
MAX_EDGE_LIMIT = 40
MAX_ATTEMPTS = 2000  # per problem; the hardest allowed targets succeed in >= 2% of attempts


def min_edges_for(max_op):
    """Fewest edges allowed for max_op: measured, below it exact-max_op problems are too rare to find."""
    return max(max_op // 2 + 2, max_op - 4)


@dataclass
class IGSMConfig:
    max_op: int = 8
    """Upper bound on arithmetic operations in a solution (1..24). Each problem's n_op is drawn
    uniformly from [ceil(max_op / 2), max_op], so a split concentrates on its own difficulty."""
    max_edge: int = 12
    """Upper bound on structure-graph edges, i.e. on instance parameters
    (min_edges_for(max_op)..40; e.g. >= 6 for max_op 8, >= 12 for max_op 16)."""
    perm_level: int = 5
    """Sentence shuffling (0..5): 0 states definitions in dependency order, 1-4 let each sentence
    drift by up to perm_level/5 of the sentence count, 5 shuffles them uniformly."""
    detail_level: int = 0
    """Irrelevant sentences (0..10): each instance parameter the question does not need is also
    stated with probability detail_level/10, together with what it depends on; 0 states only
    needed ones."""
    seed: int = 42
    """Base seed (>= 0); problem i is generated from seeds derived from (seed, max_op, i) only, so
    splits sharing seed and max_op share problems: give train and test different seeds."""

    def __post_init__(self):
        _require_int("max_op", self.max_op, 1, MAX_SUPPORTED_OP)
        _require_int("max_edge", self.max_edge, min_edges_for(self.max_op), MAX_EDGE_LIMIT,
                     f" when max_op={self.max_op}")
        _require_int("perm_level", self.perm_level, 0, MAX_PERM_LEVEL)
        _require_int("detail_level", self.detail_level, 0, MAX_DETAIL_LEVEL)
        _require_int("seed", self.seed, 0, 2**63 - 1)


def _require_int(field, value, low, high, context=""):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{field}={value!r} is invalid: expected an int in [{low}, {high}]{context}")


class _Expr(NamedTuple):
    """How an instance parameter is stated: `core` over `operands`, optionally wrapped by `modifier`."""
    core: str  # "const" | "single" | "sum" | "difference" | "product"
    operands: tuple = ()
    modifier: str = ""  # "" | "more" | "less" | "times"
    constant: int = 0


def _random_modifier(rng):
    modifier = rng.choice(("more", "less", "times"))
    return modifier, rng.randint(2 if modifier == "times" else 1, MOD - 1)


def _sample_recent(rng, items, count):
    """Distinct items, later ones likelier, so dependency chains get deep enough for large max_op."""
    pool, chosen = list(items), []
    for _ in range(count):
        chosen.append(pool.pop(rng.choices(range(len(pool)), weights=range(1, len(pool) + 1))[0]))
    return chosen


class _World:
    """One sampled problem world. Parameters are tuples: ("inst", a, b) for "each a's b" and
    ("abs", a, layer) for "the total number of <that layer's category> in each a"."""

    def __init__(self, rng, max_edge):
        self._build_structure(rng, max_edge)
        self.deps = {}  # parameter -> parameters its value is computed from
        for a, layer in self.level.items():
            for target in range(layer + 1, len(self.families)):
                self.deps[("abs", a, target)] = [
                    dep for b in self.children[a] for dep in
                    [("inst", a, b)] + ([("abs", b, target)] if self.level[b] < target else [])]
        self.exprs, self.position = {}, {}  # position: each parameter comes after its dependencies
        self._define_instances(rng)
        self.value, self.closure, self.n_op = {}, {}, {}
        for param in self.position:
            self.value[param] = self._evaluate(param)
            self.closure[param] = {param}.union(*(self.closure[d] for d in self.deps[param]))
            self.n_op[param] = sum(self.own_ops(p) for p in self.closure[param])

    def _build_structure(self, rng, max_edge):
        hierarchy = rng.choice(HIERARCHIES)
        depth = rng.randint(2, min(len(hierarchy), max_edge + 1))  # a chain of d layers needs d-1 edges
        first = rng.randint(0, len(hierarchy) - depth)
        self.families = hierarchy[first:first + depth]
        sizes = [rng.randint(2, 4) for _ in self.families]
        while sum(max(sizes[i], sizes[i + 1]) for i in range(depth - 1)) > max_edge:
            sizes[max(range(depth), key=lambda i: (sizes[i], i))] -= 1
        layers = [rng.sample(family.items, size) for family, size in zip(self.families, sizes)]
        edges, extras = [], []
        for upper, lower in zip(layers, layers[1:]):
            # Pairing the k-th items (cyclically) gives every item an edge using the fewest edges.
            span = max(len(upper), len(lower))
            spanning = [(upper[k % len(upper)], lower[k % len(lower)]) for k in range(span)]
            edges += spanning
            extras += [(a, b) for a in upper for b in lower if (a, b) not in spanning]
        total = rng.randint(len(edges), min(max_edge, len(edges) + len(extras)))
        self.edges = edges + rng.sample(extras, total - len(edges))
        self.level = {item: index for index, layer in enumerate(layers) for item in layer}
        self.children = {item: [b for a, b in self.edges if a == item] for item in self.level}

    def _define_instances(self, rng):
        # Deeper abstract parameters first, so a parent becomes usable right after its children.
        pending = sorted(self.deps, key=lambda p: -self.level[p[1]])
        for a, b in rng.sample(self.edges, len(self.edges)):
            count = min(rng.choices((0, 1, 2, 3), weights=(3, 3, 3, 1))[0], len(self.position))
            operands = tuple(_sample_recent(rng, self.position, count))
            if count == 0:
                expr = _Expr("const", constant=rng.randint(0, MOD - 1))
            elif count == 1:  # a bare copy "equals X" would be a 0-op definition, so always modify it
                expr = _Expr("single", operands, *_random_modifier(rng))
            else:
                core = rng.choice(("sum", "difference", "product")) if count == 2 else "sum"
                expr = _Expr(core, operands, *(_random_modifier(rng) if rng.random() < 0.3 else ("", 0)))
            self.exprs[("inst", a, b)] = expr
            self.deps[("inst", a, b)] = list(operands)
            self.position[("inst", a, b)] = len(self.position)
            for param in [p for p in pending if all(d in self.position for d in self.deps[p])]:
                pending.remove(param)
                self.position[param] = len(self.position)

    def _child_terms(self, param):
        """Abstract parameter's terms: (child edge, the child's own total, or None if the child is in the
        target layer and so counts once)."""
        _, _, target = param
        return [(edge, ("abs", edge[2], target) if self.level[edge[2]] < target else None)
                for edge in self.deps[param] if edge[0] == "inst"]

    def _evaluate(self, param):
        if param[0] == "abs":
            return sum(self.value[edge] * (self.value[total] if total else 1)
                       for edge, total in self._child_terms(param)) % MOD
        expr = self.exprs[param]
        values = [self.value[p] for p in expr.operands]
        core = {"const": lambda: expr.constant, "single": lambda: values[0], "sum": lambda: sum(values),
                "difference": lambda: values[0] - values[1], "product": lambda: values[0] * values[1]}
        result = core[expr.core]()
        return {"": result, "more": expr.constant + result, "less": result - expr.constant,
                "times": expr.constant * result}[expr.modifier] % MOD

    def own_ops(self, param):
        if param[0] == "abs":  # c child terms joined by c-1 "+", plus one "*" per child total
            return len(self.deps[param]) - 1
        expr = self.exprs[param]
        return max(len(expr.operands) - 1, 0) + (1 if expr.modifier else 0)

    def phrase(self, param):
        if param[0] == "inst":
            return f"each {param[1]}'s {param[2]}"
        return f"the total number of {self.families[param[2]].plural} in each {param[1]}"

    def sentence(self, param):
        expr = self.exprs[param]
        shown = [self.phrase(p) for p in expr.operands]
        listed = ", ".join(shown[:-1]) + " and " + shown[-1] if len(shown) > 1 else "".join(shown)
        core = {"const": str(expr.constant), "single": listed, "sum": f"the sum of {listed}",
                "difference": f"the difference of {listed}", "product": f"the product of {listed}"}[expr.core]
        prefix = {"": "", "more": f"{expr.constant} more than ", "less": f"{expr.constant} less than ",
                  "times": f"{expr.constant} times "}[expr.modifier]
        return f"The number of {self.phrase(param)} equals {prefix}{core}."

    def question(self, param):
        if param[0] == "inst":
            return f"How many {param[2]} does each {param[1]} have?"
        return f"How many {self.families[param[2]].plural} does each {param[1]} have in total?"

    def formula(self, param, show):
        """Arithmetic for `param` with each dependency rendered by `show` (as variable or value)."""
        if param[0] == "abs":
            return " + ".join(f"{show(edge)} * {show(total)}" if total else show(edge)
                              for edge, total in self._child_terms(param))
        expr = self.exprs[param]
        shown = [show(p) for p in expr.operands]
        core = {"const": str(expr.constant), "single": "".join(shown), "sum": " + ".join(shown),
                "difference": " - ".join(shown), "product": " * ".join(shown)}[expr.core]
        if expr.modifier == "times" and len(shown) > 1:
            core = f"({core})"
        return {"": core, "more": f"{expr.constant} + {core}", "less": f"{core} - {expr.constant}",
                "times": f"{expr.constant} * {core}"}[expr.modifier]


def _permute(rng, items, perm_level):
    if perm_level == MAX_PERM_LEVEL:
        return rng.sample(items, len(items))
    window = len(items) * perm_level / MAX_PERM_LEVEL
    keys = [index + rng.uniform(0, window) for index in range(len(items))]
    return [item for _, item in sorted(zip(keys, items), key=lambda pair: pair[0])]


def _sample_problem(rng, config, target_op):
    """A problem whose question needs exactly target_op operations, or None to retry."""
    world = _World(rng, config.max_edge)
    candidates = [p for p in world.position if world.n_op[p] == target_op]
    if not candidates:
        return None
    asked = rng.choice(candidates)
    needed = sorted(world.closure[asked], key=world.position.get)
    if len(needed) > len(string.ascii_letters):
        return None
    stated = {p for p in needed if p[0] == "inst"}
    extra_probability = config.detail_level / MAX_DETAIL_LEVEL
    for param in world.position:
        if param[0] == "inst" and param not in stated and rng.random() < extra_probability:
            # Its dependencies come along so that every sentence refers only to stated quantities.
            stated |= {p for p in world.closure[param] if p[0] == "inst"}
    stated = _permute(rng, sorted(stated, key=world.position.get), config.perm_level)
    question = " ".join([world.sentence(p) for p in stated] + [world.question(asked)])

    names = dict(zip(needed, rng.sample(string.ascii_letters, len(needed))))
    steps = []
    for param in needed:
        chain = [str(world.value[param])]
        if param[0] == "abs" or world.exprs[param].core != "const":
            # A 0-op step ("so R = p = 5") has nothing to substitute; others show the values plugged in.
            plugged_in = world.formula(param, lambda p: str(world.value[p]))
            substituted = [plugged_in] if world.own_ops(param) else []
            chain = [world.formula(param, names.get)] + substituted + chain
        label = world.phrase(param).removeprefix("each ")
        steps.append(f"Define {label} as {names[param]}; so {names[param]} = {' = '.join(chain)}.")
    steps.append(f"Thus, the answer is {world.value[asked]}.")
    return {"question": question, "solution": " ".join(steps),
            "answer": str(world.value[asked]), "n_op": world.n_op[asked]}


def generate(config, n):
    """Generate n problems; problem i depends only on (config, i), not on n."""
    _require_int("n", n, 0, 10**7)
    records = []
    for index in range(n):
        # String seeds are hashed with SHA-512 by random.Random, so PYTHONHASHSEED has no effect.
        problem_seed = f"igsm/{config.seed}/{config.max_op}/{index}"
        # Fixing the target across retries keeps n_op uniform; retries would otherwise favour easy targets.
        target_op = random.Random(problem_seed).randint((config.max_op + 1) // 2, config.max_op)
        for attempt in range(MAX_ATTEMPTS):
            problem = _sample_problem(random.Random(f"{problem_seed}/{attempt}"), config, target_op)
            if problem is not None:
                break
        else:
            raise RuntimeError(f"no problem with {target_op} ops after {MAX_ATTEMPTS} attempts; "
                               f"raise max_edge (now {config.max_edge})")
        records.append({"id": f"igsm-op{config.max_op}-seed{config.seed}-{index:05d}", **problem,
                        "max_op": config.max_op, "seed": config.seed})
    return records


def write_jsonl(records, path):
    write_text(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
