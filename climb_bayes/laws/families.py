"""Language families for MSL's per-family form: a shipped table and the ``--families`` choice.

He et al. (2024) fit their multilingual scaling law per *language family*: a language's loss
depends on the summed share of its family, because languages of one family profit from each
other's data. The table below gives the genus-level family (Germanic, Romance, Slavic,
Indo-Aryan, ...; the "genus" level of WALS, Dryer & Haspelmath 2013, which Glottolog calls the
subfamily) of common languages by ISO 639-1 code (and a few ISO 639-3 codes and English names).
Groups that are not in the table -- Pile domains, code, unknown languages -- form a family of
their own, i.e. the per-group form.

``--families`` takes ``auto`` (the default: this table), ``none`` (every group on its own, the
per-group form) or a file (CSV ``group,family`` or JSON ``{"group": "family"}``;
:func:`climb_bayes.laws.msl.read_families`).

References
----------
.. [1] He et al. (2024), "Scaling Laws for Multilingual Language Models", arXiv:2410.12883
   (the family-level independence hypothesis).
.. [2] Dryer & Haspelmath (eds., 2013), The World Atlas of Language Structures Online
   (genera); Hammarström et al., Glottolog 5 (classification).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "LANGUAGE_FAMILIES",
    "FamilyChoice",
    "table_families",
    "resolve_families",
    "describe_families",
]

_FAMILY_MEMBERS: dict[str, tuple[str, ...]] = {
    "Germanic": ("en", "de", "nl", "sv", "da", "no", "nb", "nn", "is", "af", "fy", "lb", "yi"),
    "Romance": ("fr", "es", "it", "pt", "ro", "ca", "gl", "oc", "co", "rm", "la"),
    "Slavic": ("ru", "uk", "be", "pl", "cs", "sk", "sl", "hr", "sr", "bs", "bg", "mk"),
    "Baltic": ("lt", "lv"),
    "Celtic": ("ga", "gd", "cy", "br"),
    "Greek": ("el",),
    "Indo-Aryan": ("hi", "ur", "bn", "pa", "gu", "mr", "ne", "si", "or", "as", "sd"),
    "Iranian": ("fa", "ps", "ku", "tg"),
    "Armenian": ("hy",),
    "Albanian": ("sq",),
    "Chinese": ("zh", "yue", "wuu"),
    "Japanese": ("ja",),
    "Korean": ("ko",),
    "Turkic": ("tr", "az", "kk", "uz", "ky", "tk", "tt", "ug"),
    "Finnic": ("fi", "et"),
    "Ugric": ("hu",),
    "Semitic": ("ar", "he", "mt", "am", "ti"),
    "Dravidian": ("ta", "te", "kn", "ml"),
    "Malayo-Polynesian": ("id", "ms", "tl", "jv", "su", "mg"),
    "Tai": ("th", "lo"),
    "Vietic": ("vi",),
    "Khmer": ("km",),
    "Bantu": ("sw", "zu", "xh", "rw"),
    "Kartvelian": ("ka",),
    "Basque": ("eu",),
}

_NAMES: dict[str, str] = {
    "english": "en", "german": "de", "dutch": "nl", "swedish": "sv", "danish": "da",
    "norwegian": "no", "icelandic": "is", "french": "fr", "spanish": "es", "italian": "it",
    "portuguese": "pt", "romanian": "ro", "catalan": "ca", "russian": "ru", "ukrainian": "uk",
    "polish": "pl", "czech": "cs", "slovak": "sk", "bulgarian": "bg", "serbian": "sr",
    "croatian": "hr", "greek": "el", "hindi": "hi", "urdu": "ur", "bengali": "bn",
    "persian": "fa", "chinese": "zh", "japanese": "ja", "korean": "ko", "turkish": "tr",
    "finnish": "fi", "estonian": "et", "hungarian": "hu", "arabic": "ar", "hebrew": "he",
    "tamil": "ta", "telugu": "te", "indonesian": "id", "malay": "ms", "thai": "th",
    "vietnamese": "vi", "swahili": "sw",
}  # fmt: skip

LANGUAGE_FAMILIES: dict[str, str] = {
    code: family for family, codes in _FAMILY_MEMBERS.items() for code in codes
}
"""Language code -> genus-level family (the shipped table; codes lower-case)."""


def _family_of(group: str) -> str | None:
    key = group.strip().lower().replace("_", "-")
    key = _NAMES.get(key, key)
    if key not in LANGUAGE_FAMILIES:
        key = key.split("-")[0]  # zh-hans, pt-br, en-us
    return LANGUAGE_FAMILIES.get(key)


def table_families(groups: Sequence[str]) -> dict[str, str]:
    """Group -> family from the shipped table, for the groups it knows (others are omitted)."""
    out = {}
    for g in groups:
        fam = _family_of(g)
        if fam is not None:
            out[g] = fam
    return out


class FamilyChoice(NamedTuple):
    """The families MSL uses: ``mapping`` (group -> family, or ``None`` for per-group) and
    ``source`` (``"table"``, ``"none"`` or the file name)."""

    mapping: dict[str, str] | None
    source: str


def resolve_families(spec: str | Path | None, groups: Sequence[str]) -> FamilyChoice:
    """What ``--families SPEC`` means for ``groups``.

    Parameters
    ----------
    spec : {"auto", "none"} or path, optional
        ``auto`` (or ``None``): the shipped table; ``none``: per group; otherwise a families
        file (:func:`climb_bayes.laws.msl.read_families`; a bad file raises ``ClimbError``).
    groups : sequence of str
        The data's groups (languages).

    Returns
    -------
    FamilyChoice
        ``mapping`` is ``None`` when no two groups share a family (the per-group form).
    """
    from climb_bayes.laws.msl import read_families

    text = "auto" if spec is None else str(spec)
    if text.lower() == "none":
        return FamilyChoice(None, "none")
    if text.lower() == "auto":
        mapping, source = table_families(groups), "table"
    else:
        mapping, source = read_families(text), Path(text).name
    shared = _shared(mapping, groups)
    return FamilyChoice(mapping if shared else None, source)


def _shared(mapping: Mapping[str, str], groups: Sequence[str]) -> dict[str, list[str]]:
    members: dict[str, list[str]] = {}
    for g in groups:
        if g in mapping:
            members.setdefault(mapping[g], []).append(g)
    return {f: gs for f, gs in members.items() if len(gs) > 1}


def describe_families(choice: FamilyChoice, groups: Sequence[str]) -> str:
    """One line for the output: which groups MSL pools, and from where."""
    if choice.mapping is None:
        why = "--families none" if choice.source == "none" else "no two groups share a family"
        return f"MSL families: per language ({why})"
    shared = _shared(choice.mapping, groups)
    pooled = {g for gs in shared.values() for g in gs}
    parts = [f"{f} ({', '.join(gs)})" for f, gs in shared.items()]
    alone = [g for g in groups if g not in pooled]
    src = "shipped table" if choice.source == "table" else choice.source
    line = f"MSL families ({src}): " + "; ".join(parts)
    if alone:
        line += f"; on their own: {', '.join(alone)}"
    return line + " (--families none: per language)"
