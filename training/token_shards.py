"""Sharded, memory-mapped token streams: one folder of raw ``uint32`` shards per language.

Layout of a stream folder (``OUT/data/<key>/<lang>/``)::

    train-00000.u32   raw little-endian uint32 token ids, at most ``shard_tokens`` of them
    train-00001.u32   ...
    index.json        written last: the shards, their token and document counts, the total

The stream is the training documents in the fixed document order, each followed by end-of-text,
written batch by batch: a shard is closed (fsync, ``os.replace``) when it holds ``shard_tokens``
tokens and the next one is started, so a document may straddle two shards and the writer never
holds more than one batch of tokens. ``index.json`` (atomic, last) is what makes the folder
valid: a folder without it is rebuilt.

:class:`TokenShards` opens the shards with :func:`numpy.memmap` (read-only) and reads positions of
the concatenated stream (a slice, an integer array, :meth:`TokenShards.take`) without
concatenating the shards: only the tokens asked for are copied.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from training.atomic import atomic_path, atomic_write_json
from training.errors import TrainingError

__all__ = ["INDEX_NAME", "TOKEN_DTYPE", "TokenShardWriter", "TokenShards"]

INDEX_NAME = "index.json"
INDEX_FORMAT = "climb-token-shards"
INDEX_VERSION = 1
TOKEN_DTYPE = np.dtype("<u4")
DEFAULT_SHARD_TOKENS = 1 << 26  # 64 Mi tokens = 256 MiB per shard


class TokenShardWriter:
    """Append token arrays to ``folder/<prefix>-NNNNN.u32`` shards; :meth:`close` writes the index.

    Parameters
    ----------
    folder
        Stream folder (created). An existing ``index.json`` is removed first, so a killed writer
        leaves a folder without index (rebuilt next time); shards of an older build that the new
        index does not name are deleted by :meth:`close`.
    shard_tokens
        Tokens per shard (the last shard may hold fewer).
    meta
        Extra fields stored in the index (e.g. vocabulary size, end-of-text id).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        shard_tokens: int = DEFAULT_SHARD_TOKENS,
        prefix: str = "train",
        meta: dict[str, Any] | None = None,
    ) -> None:
        if shard_tokens < 1:
            raise ValueError(f"shard_tokens must be >= 1, got {shard_tokens}")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / INDEX_NAME).unlink(missing_ok=True)
        self.shard_tokens = int(shard_tokens)
        self.prefix = prefix
        self.meta = dict(meta or {})
        self.shards: list[dict[str, Any]] = []
        self._ctx: Any = None
        self._fh: Any = None
        self._n = 0  # tokens in the open shard
        self._doc_counts: dict[int, int] = {}  # shard number -> documents ending in it
        self.total = 0
        self.documents = 0
        self._closed = False

    def _open(self) -> None:
        name = f"{self.prefix}-{len(self.shards):05d}.u32"
        self._ctx = atomic_path(self.folder / name)
        tmp = self._ctx.__enter__()
        self._fh = open(tmp, "wb")  # noqa: SIM115 - closed in _finish/abort
        self._name = name
        self._n = 0

    def _finish(self) -> None:
        self._fh.close()
        self._ctx.__exit__(None, None, None)  # fsync + os.replace
        self.shards.append({"name": self._name, "tokens": self._n})
        self._fh = self._ctx = None

    def write(self, tokens: np.ndarray, doc_lengths: Any = None) -> None:
        """Append ``tokens``, the next part of the stream.

        ``doc_lengths`` (optional) are the lengths of the documents these tokens consist of
        (summing to ``len(tokens)``); each document is counted in the shard where it ends.
        """
        arr = np.asarray(tokens)
        if arr.size and (arr.min() < 0 or int(arr.max()) > np.iinfo(TOKEN_DTYPE).max):
            raise TrainingError("token ids must lie in [0, 2**32) to be stored as uint32")
        arr = arr.astype(TOKEN_DTYPE, copy=False).ravel()
        if doc_lengths is not None:
            lengths = np.asarray(doc_lengths, dtype=np.int64)
            if int(lengths.sum()) != arr.shape[0] or (lengths.size and lengths.min() < 1):
                raise ValueError("doc_lengths must be >= 1 and sum to the number of tokens")
            ends = self.total + np.cumsum(lengths)  # exclusive end of each document
            for k, c in enumerate(np.bincount((ends - 1) // self.shard_tokens).tolist()):
                if c:
                    self._doc_counts[k] = self._doc_counts.get(k, 0) + c
            self.documents += int(lengths.size)
        pos = 0
        while pos < arr.shape[0]:
            if self._fh is None:
                self._open()
            k = min(self.shard_tokens - self._n, arr.shape[0] - pos)
            self._fh.write(arr[pos : pos + k].tobytes())
            self._n += k
            pos += k
            if self._n == self.shard_tokens:
                self._finish()
        self.total += int(arr.shape[0])

    def close(self, **extra: Any) -> dict[str, Any]:
        """Close the last shard, write ``index.json`` (atomically, last) and return the index."""
        if self._fh is not None:
            self._finish()
        for k, shard in enumerate(self.shards):
            shard["documents"] = self._doc_counts.get(k, 0)
        index = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "dtype": TOKEN_DTYPE.str,
            "shard_tokens": self.shard_tokens,
            "shards": self.shards,
            "total_tokens": self.total,
            "documents": self.documents,
            **self.meta,
            **extra,
        }
        atomic_write_json(self.folder / INDEX_NAME, index)
        keep = {s["name"] for s in self.shards}
        for old in self.folder.glob(f"{self.prefix}-*.u32"):
            if old.name not in keep:
                old.unlink(missing_ok=True)
        self._closed = True
        return index

    def abort(self) -> None:
        """Drop the open shard's temporary file (no index is written)."""
        if self._fh is not None:
            self._fh.close()
            err = RuntimeError("shard writer aborted")
            self._ctx.__exit__(RuntimeError, err, None)  # removes the temporary file
            self._fh = self._ctx = None

    def __enter__(self) -> TokenShardWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()


class TokenShards:
    """Read-only view of a sharded token stream as one 1-d array (see the module docstring).

    Supports ``len()``, ``.shape``, integer and ``start:stop`` slice indexing, indexing with an
    integer array (any order, negative positions count from the end) and :meth:`take` (the first
    ``n`` tokens). Results are ordinary ``uint32`` arrays holding only the tokens asked for.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        path = self.folder / INDEX_NAME
        try:
            index = json.loads(path.read_text(encoding="utf-8"))
            if index.get("format") != INDEX_FORMAT or int(index["version"]) != INDEX_VERSION:
                raise ValueError(f"not a version-{INDEX_VERSION} {INDEX_FORMAT} index")
            dtype = np.dtype(index["dtype"])
            self._maps = []
            for s in index["shards"]:
                f = self.folder / s["name"]
                if f.stat().st_size != int(s["tokens"]) * dtype.itemsize:
                    raise ValueError(
                        f"{f.name} holds {f.stat().st_size} bytes, index says {s['tokens']} tokens"
                    )
                self._maps.append(np.memmap(f, dtype=dtype, mode="r"))
        except (OSError, KeyError, ValueError, TypeError) as exc:
            raise TrainingError(
                f"{self.folder}: token shards are missing or damaged ({type(exc).__name__}: "
                f"{exc}). Fix: delete that folder and run the sweep again to rebuild it."
            ) from None
        self.index: dict[str, Any] = index
        counts = np.array([m.shape[0] for m in self._maps], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._len = int(self._starts[-1])
        if self._len != int(index["total_tokens"]):
            raise TrainingError(
                f"{self.folder}: the shards hold {self._len} tokens, the index says "
                f"{index['total_tokens']}. Fix: delete that folder and run the sweep again."
            )
        self.dtype = dtype

    def __len__(self) -> int:
        return self._len

    @property
    def shape(self) -> tuple[int]:
        return (self._len,)

    @property
    def n_shards(self) -> int:
        return len(self._maps)

    def take(self, n: int) -> np.ndarray:
        """The first ``n`` tokens (``n <= len(self)``), copied from the shards they lie in."""
        if not 0 <= n <= self._len:
            raise IndexError(f"take({n}) from a stream of {self._len} tokens")
        return self._range(0, n)

    def _range(self, start: int, stop: int) -> np.ndarray:
        out = np.empty(max(0, stop - start), dtype=self.dtype)
        if stop <= start:
            return out
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        pos = start
        k = first
        while pos < stop:
            lo = int(self._starts[k])
            hi = min(stop, int(self._starts[k + 1]))
            out[pos - start : hi - start] = self._maps[k][pos - lo : hi - lo]
            pos = hi
            k += 1
        return out

    def _gather(self, pos: np.ndarray) -> np.ndarray:
        pos = pos.astype(np.int64, copy=False)
        if pos.size and (pos.min() < -self._len or pos.max() >= self._len):
            raise IndexError(f"position out of range for a stream of {self._len} tokens")
        pos = np.where(pos < 0, pos + self._len, pos)
        out = np.empty(pos.shape, dtype=self.dtype)
        shard = np.searchsorted(self._starts, pos, side="right") - 1
        for k in np.unique(shard).tolist():
            sel = shard == k
            out[sel] = self._maps[k][pos[sel] - self._starts[k]]
        return out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._len)
            if step != 1:
                return self._gather(np.arange(start, stop, step))
            return self._range(start, stop)
        if isinstance(key, (int, np.integer)):
            i = int(key)
            return self._gather(np.array([i]))[0]
        return self._gather(np.asarray(key))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The whole stream as one array (O(stream) memory: for tests and small data)."""
        arr = self._range(0, self._len)
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        return f"TokenShards({str(self.folder)!r}, {self._len} tokens, {self.n_shards} shards)"
