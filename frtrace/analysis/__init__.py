"""Stage 2, analysis: a ``DumpSet`` (with what else the job left: the ranks' Python stacks,
its logs' failures, ``collect``'s manifest) in, one ``Report`` out. Three steps, one folder
each:

1. ``facts``: everything computed from the evidence once (groups and members, the ops lined
   up across members by sequence id, when each dump was written, the wait graph, where each
   rank's stack is), one frozen ``Facts``;
2. ``rules``: one module per rule, each ``check(facts)`` says what it sees as ``Finding``s
   with their typed evidence, never reading another rule;
3. ``verdict``: the one place findings are weighed against each other into the verdict and
   the culprits (its docstring is the order of precedence).

``diagnose`` runs the three and makes the ``Report`` once, with the stragglers, what the
dumps could not show (``notes``) and the stacks held against the verdict (``stackjoin``).
``compare`` reads two snapshots, ``series`` periodic stack samples, ``codec`` keeps a
``Report`` as JSON. Pure functions of the tables: no I/O, no printing, no words.
"""
