"""The rule tests' Facts builder (``facts_builder.py``) makes what the loader and
``gather_facts`` make of the same dumps written to disk: its facts are never set by hand."""

from __future__ import annotations

from pathlib import Path

from frtrace.analysis.facts import gather_facts
from frtrace.load.tables import load_dumps
from tests.analysis.facts_builder import Job, host, in_call
from tests.conftest import write_pickle


def _scenario(backend: str) -> Job:
    job = Job(world=4, backend="gloo" if backend == "gloo" else "nccl", missing=(3,))
    job.group("1", (0, 1))
    job.done("all_reduce", range(1, 4), ranks=(0, 1, 2))
    job.enter("broadcast", 1, group="1", state="completed")
    return job.enter("all_reduce", 4, ranks=(0, 1), state="started", unrecorded=2)


def test_built_dumps_are_the_loaders_tables_of_the_written_files(tmp_path: Path) -> None:
    """NCCL and Gloo: each rank's dump written as a pickle and loaded from the folder gives the
    same entries, groups and pg_status tables and world size as the builder's in-memory set."""
    for backend in ("nccl", "gloo"):
        job = _scenario(backend)
        folder = tmp_path / backend
        for rank in (0, 1, 2):
            write_pickle(folder / f"rank_{rank}", job.dump(rank))
        loaded, built = load_dumps(folder), job.dumps()
        assert built.entries.equals(loaded.entries)
        assert built.groups.equals(loaded.groups) and built.pg_status.equals(loaded.pg_status)
        assert (built.world, built.loaded_ranks, built.missing_ranks) == (
            loaded.world,
            loaded.loaded_ranks,
            loaded.missing_ranks,
        )


def test_the_facts_are_gather_facts_of_those_dumps() -> None:
    """The facts' membership, matched ops, wait graph, moments and stack places are those
    gather_facts computes from the builder's dump set."""
    job = _scenario("nccl")
    facts = job.facts(dumped_at_s={0: 5.0}, stacks={0: in_call("all_reduce"), 2: host()})
    again = gather_facts(job.dumps(), dumped_at_ns=dict(facts.moments.dumped_at_ns))
    assert facts.membership == again.membership
    assert facts.matched.blocked == again.matched.blocked
    assert (facts.waits.edges, facts.waits.roots) == (again.waits.edges, again.waits.roots)
    assert facts.moments == again.moments and facts.moments.dumped_at_ns[0] > 0
    assert dict(facts.unrecorded) == dict(again.unrecorded)
    assert {r: p.place for r, p in facts.places.items()} == {0: "collective", 2: "host code"}
    assert facts.matched.blocked.keys() == {0, 1}
