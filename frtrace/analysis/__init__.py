"""Stage 2, analysis: a ``DumpSet`` (and, where collected, the ranks' Python stacks) in, a
``Report`` (``findings``) out.

``groups`` works out each process group and its members; ``match`` lines up every group's ops
across members by sequence id (records in ``ops``, coalesced runs in ``coalesce``, completion
and pending ops in ``pending``, retired ops that cannot have completed in ``failure``) and
finds where each rank is blocked; ``capture`` reads when each dump was written, to tell a
running job from a stall; ``waitgraph`` builds the networkx graph of which rank waits on
which. One module per kind of finding (``mismatch``, ``alltoall``, ``deadlock``,
``stragglers``, ``unrecorded``, ``hang``, ``stuck``) reads those; ``diagnose`` runs them all
and decides the verdict and culprits, with ``notes`` saying what the dumps cannot show.
``stackjoin`` joins the collected stacks with the verdict; ``compare`` reads two snapshots.
Pure functions of the tables: no I/O, no printing.
"""
