"""Stage 0, the incident: a folder or archive in, what it holds out, every file found once.

Each file is known for what it is (``layout``: a dump, a stack file, a log, an error file, a
sidecar, a manifest, a periodic dump), listed once (``listing``; a folder walked by
``discover``, an archive's members read in memory by ``archive`` through ``unpack``; a file
compressed on its own, ``rank_1.gz``, unpacked in memory by ``compressed``), and sorted
into the dump sets, attempts, copies and snapshots of one incident (``discover``,
``attempts``). What the caches key on is taken here (``fingerprint``); what a file could not
give is a ``problems.LoadProblem``. Every reader shares the limits set here: what one untrusted
file may cost (``budget``) and how much memory reading may use (``memory``). The dump reader
(``frtrace.load``), the stack and log readers (``frtrace.pystack``, ``frtrace.evidence``) and
the cache key take this stage's ``Discovery``; none of them lists a folder again.
"""
