"""What is computed from the evidence, once, before any rule runs: the ``Facts``.

Process groups and their members (``groups``), the ops lined up by (group, seq) across
members (``match``, ``coalesce``, ``pending``, ``segments``, ``ops``), the ops that cannot
have completed (``failure``), when each dump was written (``capture``), who waits on whom
(``waitgraph``), the ops a Gloo rank counted but did not write (``unrecorded``), the
collectives a recorder cannot see (``blind``), each entry's
signature and call site (``signatures``), where each rank's Python stack is (``places``) and
which process each rank ran in (``processes``); ``assemble`` computes them all into one frozen
``Facts``. Nothing here names a culprit: the rules (``analysis.rules``) read these facts.
"""

from frtrace.analysis.facts.assemble import Facts, facts_of, gather_facts, stateless_ranks

__all__ = ["Facts", "facts_of", "gather_facts", "stateless_ranks"]
