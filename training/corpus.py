"""Per-language documents from local files, and the validation hold-out.

Layout of a corpus directory ``DIR`` (one language = one or more files, one document per record):

* ``DIR/<lang>.jsonl``, ``DIR/<lang>.jsonl.xz``, ``DIR/<lang>.jsonl.gz``, ``DIR/<lang>.parquet``
  or ``DIR/<lang>.txt``; or
* a folder ``DIR/<lang>/`` holding such files at any depth (e.g. FineWeb-2 shards
  ``DIR/de/000_00000.parquet``); ``corpus_map`` can point a language at another folder, e.g.
  ``{"de": "deu_Latn/train"}``.

Records: JSON lines and Parquet need a string field/column ``text``; a ``.txt`` file holds one
document per non-empty line.

The documents of a language are put in a fixed pseudo-random order that depends only on the seed
and the language (:func:`document_order`). Validation documents are taken from the front of that
order, the tokenizer sample from the back, and training text is everything after the validation
documents, so validation and training never share a document.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from training.errors import TrainingError

__all__ = [
    "SUFFIXES",
    "find_language_files",
    "read_documents",
    "document_order",
    "corpus_fingerprint",
    "split_validation",
]

SUFFIXES = (".jsonl.xz", ".jsonl.gz", ".jsonl", ".parquet", ".txt")


def _has_suffix(path: Path) -> bool:
    return path.is_file() and any(path.name.endswith(s) for s in SUFFIXES)


def find_language_files(
    corpus_dir: str | Path, lang: str, corpus_map: Mapping[str, str] | None = None
) -> list[Path]:
    """Return the sorted document files of one language.

    Parameters
    ----------
    corpus_dir
        The corpus directory.
    lang
        Language code as used in the plan (``r_<lang>`` columns).
    corpus_map
        Optional ``{lang: relative path}`` overrides (a file or a folder inside ``corpus_dir``).

    Raises
    ------
    TrainingError
        If the directory does not exist or holds no file for ``lang``.
    """
    root = Path(corpus_dir)
    if not root.is_dir():
        raise TrainingError(
            f"corpus directory {root} does not exist. Fix: pass --corpus DIR with one "
            f"<lang>.jsonl[.xz]/.parquet/.txt file or <lang>/ folder per language."
        )
    if corpus_map and lang in corpus_map:
        candidates = [root / corpus_map[lang]]
    else:
        candidates = [root / f"{lang}{s}" for s in SUFFIXES] + [root / lang]
    files: list[Path] = []
    for cand in candidates:
        if cand.is_dir():
            files.extend(sorted(p for p in cand.rglob("*") if _has_suffix(p)))
        elif _has_suffix(cand):
            files.append(cand)
    if not files:
        present = sorted(
            {p.name.split(".")[0] for p in root.iterdir() if _has_suffix(p) or p.is_dir()}
        )
        raise TrainingError(
            f"language {lang!r} of the plan has no documents in {root} (looked for "
            f"{lang}.jsonl[.xz|.gz], {lang}.parquet, {lang}.txt and {lang}/). Languages found: "
            f"{', '.join(present) or 'none'}. Fix: add the files, map the language with "
            f"--corpus-map {lang}=SUBDIR, or drop r_{lang} from the plan."
        )
    return files


def _read_jsonl(path: Path) -> list[str]:
    opener: Callable = open
    if path.name.endswith(".xz"):
        opener = lzma.open
    elif path.name.endswith(".gz"):
        opener = gzip.open
    docs: list[str] = []
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TrainingError(
                        f"{path}:{lineno}: not a JSON object ({exc.msg}). Fix: the file must "
                        f"hold one JSON object per line with a string field 'text'; re-create "
                        f"or re-download it."
                    ) from None
                text = rec.get("text") if isinstance(rec, dict) else None
                if not isinstance(text, str):
                    raise TrainingError(
                        f"{path}:{lineno}: record has no string field 'text'. Fix: write one "
                        f'JSON object per line like {{"text": "..."}}.'
                    )
                if text.strip():
                    docs.append(text)
    except (lzma.LZMAError, gzip.BadGzipFile, EOFError, UnicodeDecodeError, OSError) as exc:
        raise TrainingError(
            f"{path}: cannot read the file ({type(exc).__name__}: {exc}). It is corrupt or "
            f"truncated. Fix: re-create or re-download it."
        ) from None
    return docs


def _read_parquet(path: Path) -> list[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TrainingError(
            f"{path}: reading Parquet needs pyarrow, which is not installed. Fix: "
            f"pip install pyarrow (or convert the files to .jsonl / .jsonl.xz)."
        ) from None

    try:
        table = pq.read_table(path, columns=["text"])
    except KeyError:
        raise TrainingError(
            f"{path}: Parquet file has no column 'text'. Fix: store documents in a string "
            f"column named 'text' (FineWeb-2 shards do)."
        ) from None
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise TrainingError(
            f"{path}: cannot read the Parquet file ({type(exc).__name__}: {exc}). Fix: "
            f"re-download or re-create it."
        ) from None
    return [t for t in table.column("text").to_pylist() if isinstance(t, str) and t.strip()]


def _read_txt(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return [line.rstrip("\n") for line in fh if line.strip()]
    except (UnicodeDecodeError, OSError) as exc:
        raise TrainingError(
            f"{path}: cannot read the text file ({type(exc).__name__}: {exc}). Fix: store it "
            f"as UTF-8, one document per line."
        ) from None


def read_documents(files: Sequence[Path], lang: str) -> list[str]:
    """Read every document of a language, in file order then record order.

    Raises
    ------
    TrainingError
        If a file is corrupt or the language ends up with no document.
    """
    docs: list[str] = []
    for path in files:
        if path.name.endswith(".parquet"):
            docs.extend(_read_parquet(path))
        elif path.name.endswith(".txt"):
            docs.extend(_read_txt(path))
        else:
            docs.extend(_read_jsonl(path))
    if not docs:
        raise TrainingError(
            f"language {lang!r}: the files {', '.join(map(str, files))} hold no non-empty "
            f"document. Fix: check the files or drop r_{lang} from the plan."
        )
    return docs


def _lang_seed(lang: str) -> int:
    return int.from_bytes(hashlib.sha256(lang.encode()).digest()[:4], "little")


def document_order(n_docs: int, seed: int, lang: str) -> np.ndarray:
    """Fixed pseudo-random order of a language's documents (depends on seed and language)."""
    return np.random.default_rng([seed, _lang_seed(lang)]).permutation(n_docs)


def corpus_fingerprint(files: Sequence[Path]) -> str:
    """Short hash of a language's files: names, sizes and the first MiB of each."""
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode())
        h.update(str(path.stat().st_size).encode())
        with open(path, "rb") as fh:
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]


def split_validation(
    docs: Sequence[str],
    order: np.ndarray,
    n_tokens: int,
    count_tokens: Callable[[list[str]], list[int]],
    lang: str,
) -> int:
    """Number of documents, from the front of ``order``, that make up the validation set.

    Documents are taken whole until they hold at least ``n_tokens`` tokens (each document counts
    its tokens plus one end-of-text separator).

    Raises
    ------
    TrainingError
        If the language has too little text for the validation set plus some training text.
    """
    total = 0
    taken = 0
    chunk = 64
    while total < n_tokens and taken < len(order):
        batch = [docs[i] for i in order[taken : taken + chunk]]
        for n in count_tokens(batch):
            total += n + 1
            taken += 1
            if total >= n_tokens:
                break
    if total < n_tokens or taken >= len(order):
        raise TrainingError(
            f"language {lang!r}: its {len(order)} documents hold {total} tokens, not enough "
            f"for {n_tokens} validation tokens plus training text. Fix: lower --val-tokens or "
            f"add documents for {lang}."
        )
    return taken
