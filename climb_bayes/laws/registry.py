"""Names of the available laws (``--laws climb,isolated,msl,dml``).

To add a law: write ``climb_bayes/laws/<name>.py`` with a :class:`~climb_bayes.laws.base.Law`
subclass and add one line to :data:`LAWS` (see ``docs/laws.md``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from climb_bayes.errors import ClimbError
from climb_bayes.laws.base import Law
from climb_bayes.laws.climb import ClimbLaw
from climb_bayes.laws.dml import DMLLaw
from climb_bayes.laws.isolated import IsolatedLaw
from climb_bayes.laws.msl import MSLLaw

__all__ = ["LAWS", "DEFAULT_LAWS", "get_law", "parse_laws", "law_spec", "law_from_spec"]

LAWS: dict[str, type[Law]] = {
    "climb": ClimbLaw,
    "isolated": IsolatedLaw,
    "msl": MSLLaw,
    "dml": DMLLaw,
}
"""Law name -> class."""

DEFAULT_LAWS = ("climb", "isolated", "msl", "dml")


def get_law(name: str, *, families: Mapping[str, str] | None = None) -> Law:
    """A law by name; ``families`` (group -> family) configures MSL's per-family form."""
    key = name.strip().lower()
    if key not in LAWS:
        raise ClimbError(f"unknown law {name!r}; known: {', '.join(LAWS)}.")
    if key == "msl":
        return MSLLaw.with_families(families)
    return LAWS[key]()


def parse_laws(spec: str, *, families: Mapping[str, str] | None = None) -> list[Law]:
    """Laws from a comma-separated list such as ``"climb,isolated,msl,dml"``."""
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ClimbError("--laws is empty; give e.g. --laws climb,isolated,msl,dml.")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ClimbError(f"--laws lists {', '.join(dup)} twice.")
    return [get_law(n, families=families) for n in names]


def law_spec(law: Law) -> str:
    """JSON of a (prepared) law's name and settings, read back by :func:`law_from_spec`."""
    fields = {f.name: getattr(law, f.name) for f in dataclasses.fields(law)}
    return json.dumps({"name": law.name, "fields": fields})


def law_from_spec(text: str) -> Law:
    """The law :func:`law_spec` wrote (lists become tuples, as the dataclasses hold them)."""
    spec = json.loads(text)
    name = spec["name"]
    if name not in LAWS:
        raise ClimbError(f"unknown law {name!r} in a fit file; known: {', '.join(LAWS)}.")

    def tuples(v: object) -> object:
        return tuple(tuples(x) for x in v) if isinstance(v, list) else v

    return LAWS[name](**{k: tuples(v) for k, v in spec["fields"].items()})
