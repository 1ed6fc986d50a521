"""One sweep over several nodes: every node runs the same ``train`` command, one run at a time.

Each run is a ``torchrun`` job spanning ``nnodes`` nodes with static rendezvous (``--nnodes N
--node-rank K --master-addr HOST --master-port PORT``), so all processes of all nodes train the
run together (DDP, or FSDP2 with ``--fsdp``). The output folder must be on a filesystem every
node sees (as on any cluster). Roles:

* node 0 (the leader) is an ordinary sweep: it holds ``OUT/sweep.lock``, prepares the tokenizer
  and token shards, writes ``OUT/sweep.json`` (with a ``multinode`` entry naming the group) and,
  at the end, the runs table;
* every other node (a follower) takes no lock and writes no table: it waits until the leader's
  ``sweep.json`` for this group appears (:func:`wait_for_leader`), reads the prepared data, and
  walks the same ordered list of unfinished runs, launching its share of each.

A follower that starts late joins the run the leader is in: both skip finished runs, and the
worker refuses to train when its ranks were given different runs
(:func:`training.loop.train_run` compares the run configuration across ranks first).
Tested on one machine with two "nodes" (two sweep processes, gloo, ``localhost``); a real
multi-node cluster is not exercised here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from training.errors import TrainingError

__all__ = ["NodeGroup", "node_group", "wait_for_leader", "LEADER_GRACE_S"]

LEADER_GRACE_S = 600.0
"""A follower accepts a leader's ``sweep.json`` written at most this long before it started
(the leader may have finished preparing the data first); an older one is from an earlier sweep."""


class NodeGroup(NamedTuple):
    """The nodes one sweep spans.

    Attributes
    ----------
    nnodes : int
        Number of nodes (1: a single-node sweep).
    node_rank : int
        This node's rank (0 leads).
    master_addr, master_port
        Where node 0's rendezvous store listens (every run reuses it).
    """

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = ""
    master_port: int = 0

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    def marker(self) -> dict[str, Any] | None:
        """What the leader writes into ``sweep.json`` (``None`` on a single node)."""
        if self.nnodes == 1:
            return None
        return {"nnodes": self.nnodes, "master": f"{self.master_addr}:{self.master_port}"}

    def torchrun_args(self) -> list[str]:
        """torchrun's rendezvous arguments for one run on this node."""
        if self.nnodes == 1:
            return ["--standalone"]
        return [
            f"--nnodes={self.nnodes}", f"--node-rank={self.node_rank}",
            f"--master-addr={self.master_addr}", f"--master-port={self.master_port}",
        ]  # fmt: skip


def node_group(
    nnodes: int, node_rank: int, master: str | None, launcher: str, slurm: bool, jobs: int
) -> NodeGroup:
    """Check the multi-node options against the rest of the sweep's and return the group."""
    if nnodes < 1 or not 0 <= node_rank < nnodes:
        raise TrainingError(
            f"--nnodes {nnodes} --node-rank {node_rank}: need nnodes >= 1 and 0 <= node-rank < "
            f"nnodes. Fix: e.g. --nnodes 2 --node-rank 0 on the first node, 1 on the second."
        )
    if nnodes == 1:
        return NodeGroup()
    if launcher != "torchrun" or slurm or jobs != 1:
        raise TrainingError(
            "--nnodes > 1 needs --launcher torchrun, without --slurm or --jobs. Fix: run the same "
            "command on every node with --launcher torchrun --nnodes N --node-rank K "
            "--master HOST:PORT (under Slurm, give --nproc and submit with --slurm instead)."
        )
    host, _, port = (master or "").rpartition(":")
    if not host or not port.isdigit():
        raise TrainingError(
            f"--master {master!r}: need HOST:PORT of node 0, the same on every node. Fix: e.g. "
            f"--master node001:29500."
        )
    return NodeGroup(nnodes, node_rank, host, int(port))


def wait_for_leader(
    out: Path,
    group: NodeGroup,
    started: float,
    log: Callable[[str], None],
    *,
    timeout_s: float = 3600.0,
    poll_s: float = 2.0,
) -> dict[str, Any]:
    """Wait until node 0 has written ``OUT/sweep.json`` for ``group``; return it.

    Accepted: a ``sweep.json`` whose ``multinode`` entry equals ``group``'s and that was written
    at most :data:`LEADER_GRACE_S` before ``started`` (``time.time()`` when this follower
    began). Raises :class:`TrainingError` after ``timeout_s``.
    """
    path = out / "sweep.json"
    want = group.marker()
    deadline = time.time() + timeout_s
    said = False
    while True:
        try:
            if path.stat().st_mtime >= started - LEADER_GRACE_S:
                sweep = json.loads(path.read_text(encoding="utf-8"))
                if sweep.get("multinode") == want:
                    return sweep
        except (OSError, json.JSONDecodeError):
            pass
        if time.time() > deadline:
            raise TrainingError(
                f"node {group.node_rank}: node 0 has not written {path} for this group "
                f"({want['master']}, {group.nnodes} nodes) within {timeout_s:.0f} s. Fix: start "
                f"the same command with --node-rank 0 and the same --out, --nnodes and --master."
            )
        if not said:
            log(f"node {group.node_rank}: waiting for node 0 to prepare the data ({path})")
            said = True
        time.sleep(poll_s)
