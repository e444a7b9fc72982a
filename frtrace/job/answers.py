"""Where ``frtrace.recorder`` writes its answer to ``frtrace collect``'s request: beside the
rank's own dump, under a hidden name of its own, never over that dump.

A rank's own dump (``comm_lib_trace_rank_3`` and ``stacks_rank_3.json``, written by its stall
watch, a signal, an exception or the script's ``dump()``) is the moment the job hung: a request
must not replace it. The answer goes to ``.comm_lib_trace_rank_3.request`` and
``.stacks_rank_3.request.json`` (``.json`` kept last), replaced by the next request, and the
recorder's reply names them; collect copies them under the rank's usual names.

Why a hidden name: stage 0 never reads one as a dump or a stack, in a folder or in an archive
of it (``frtrace.incident.layout``, ``frtrace.incident.archive``), so ``frtrace analyze`` on
the dump folder reads the same files, and gives the same answer, before and after any
request. A visible name would not keep that: a second dump of the rank in its folder is a
second name pattern (two sets, or merged with the first as one process's recorders), and a
``requests/`` folder a later snapshot only where every rank was asked (several sets where
collect asked one host's ranks of a folder all hosts share).
"""

from __future__ import annotations

__all__ = ["ANSWERS_APART", "answer_name"]

# the registry entry's key that says the recorder answers under ``answer_name`` (an older
# recorder writes its answer over its own dump: collect does not ask it over one)
ANSWERS_APART = "answers_apart"


def answer_name(name: str) -> str:
    """The name of collect's answer beside the rank's own file ``name`` (its dump's or its
    stacks sidecar's): ``.comm_lib_trace_rank_3.request``, ``.stacks_rank_3.request.json``."""
    stem, dot_json = (name[:-5], ".json") if name.endswith(".json") else (name, "")
    return f".{stem}.request{dot_json}"
