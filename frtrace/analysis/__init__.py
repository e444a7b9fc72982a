"""Stage 2, analysis: a ``DumpSet`` in, a ``Report`` (``findings``) out.

``groups`` works out each process group and its members; ``match`` lines up every group's ops
across members by sequence id (coalesced runs in ``coalesce``, completion and pending ops in
``pending``) and finds where each rank is blocked; ``waitgraph`` builds the networkx graph of
which rank waits on which. One module per kind of finding (``mismatch``, ``deadlock``,
``stragglers``, ``unrecorded``, ``hang``, ``stuck``) reads those; ``diagnose`` runs them all
and decides the verdict and culprits, with ``notes`` saying what the dumps cannot show.
Pure functions of the tables: no I/O, no printing.
"""
