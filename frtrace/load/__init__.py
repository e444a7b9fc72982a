"""Stage 1, loading: the incident's dump files (``frtrace.incident``) in, a ``DumpSet`` out.

The stage's face, what the stages above may import:
- ``tables``: ``load_dumps``, the one way in (its options in ``options``), and ``DumpSet``'s
  assembly; ``dumpset``: the loaded set; ``schema``: its five Arrow tables' columns;
- ``cache``: the loaded tables kept between runs (its files' checksums and eviction in
  ``cachefiles``); ``restarts``: a restarted job's other
  attempts; ``lifetimes``: the ranks of one process lifetime (stale dumps set aside);
  ``inits``: an attempt's own (the dumps of processes that died in init, its world);
  ``empty``: the set of a job that left no dump; ``recorders``: a rank's several dumps (one
  process's recorders) made one rank's evidence;
- ``summary`` and ``export``: what the loaded tables offer on their own (no analysis);
  ``opkinds``: the op families whose sizes may differ; ``hooks``: what the analysis may ask of
  the load (memory given back, a column's pages released, the C counting sort).

Its three rooms, internal to the stage:
- ``read/``: one dump to columns (``parse``, ``unpickle``, ``declared``, ``framing``,
  ``formats``, ``columns``, ``entries``, ``plain``, ``values``, ``arrays``, ``interning``,
  ``filerows``, ``wire``, ``native`` and the C reader);
- ``workers/``: where files are read (``parallel``, ``worker``, ``executors``,
  ``cluster``, ``frontier``, ``bundle``);
- ``handover/``: the columns' way to where they stay (``shipped``, ``gather``, ``outputs``,
  ``ipcfile``, ``spill``, ``merging``, ``members``, ``siderows``).
Nothing here knows about hangs: it only reads, validates and records what could not be read.
"""
