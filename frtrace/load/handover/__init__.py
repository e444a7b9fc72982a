"""The columns' way to where they stay: batches in, the loaded set's tables out.

A large set's worker writes its columns to a file of its own (``shipped``); the parent gathers
them in file order (``gather``) into one Arrow IPC file written around holes (``ipcfile``,
filled by the threads of ``outputs``), on disk and memory-mapped (``spill``). Every file's batch
is merged into one table (``merging``), beside the small tables of files, groups and pg_status
(``siderows``; each distinct member list stored once by ``members``).
"""
