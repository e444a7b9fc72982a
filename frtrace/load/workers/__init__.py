"""Where the dump files are read: this machine's watched worker processes, any executor, or a
Dask cluster; a parsed file in, its batch (or a bundle of several) out.

``parallel`` runs the watched worker processes (each one ``worker``) and counts the load phase;
``executors`` is the seam for any ``concurrent.futures`` executor or a cluster; ``cluster``
reads a large set on Dask in two passes, cutting each group's history to its ``frontier``,
each task's dumps sent back as one ``bundle``.
"""
