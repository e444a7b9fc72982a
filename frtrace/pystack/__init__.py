"""Python stacks collected from a hung job's ranks: files in, per-rank stacks and classes out.

A stage beside ``load``: ``parse`` reads what people collect (``py-spy dump`` text and
``--json`` in ``pyspy``, faulthandler and torch's ``dump_traceback`` in ``tracebacks``, the
recorder's sidecar written by ``frtrace.job.sidecar``) into ``model.ProcessStacks``; ``where``
finds the innermost frame that is the user's code; ``classes`` groups the ranks by stack, as
STAT does for MPI jobs. stdlib only; nothing here imports torch.
"""
