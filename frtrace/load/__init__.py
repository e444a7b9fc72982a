"""Stage 1, loading: a directory (or archive) of per-rank dump files in, a ``DumpSet`` out.

``discover`` finds the files and each one's rank; ``parse`` reads one file (the only place that
unpickles, through ``unpickle``; formats and JSON normalisation in ``formats``; the columns in
``columns`` and ``entries``; stacks interned in ``stacks``) into an Arrow batch, in worker
processes (``parallel``, or elsewhere through ``executors``); ``tables`` merges the batches
into the five tables of ``schema`` (the groups' member lists stored once by ``members``; a
large set's entry columns on disk, memory-mapped, by ``spill``), which ``cache`` keeps
between runs.
``summary`` and ``export`` are what the loaded tables offer on their own (no analysis).
Nothing here knows about hangs: it only reads, validates and records what could not be read.
"""
