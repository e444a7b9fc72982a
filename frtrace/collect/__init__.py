"""Collecting: a live, hung job on this host in; its ranks' evidence in a directory out.

A stage of its own, not part of ``job/``: ``job/`` runs *inside* the training process and
must stay free to import, while ``collect`` runs *beside* it, as a separate command on each
host (``frtrace collect DIR``, by hand or through srun/pdsh), and needs subprocesses, signals
and sockets. It imports only ``job`` (the file names and the recorder's registry it shares
with the job side), never the analysis; the CLI runs the analysis afterwards.

``procs`` finds the job's rank processes from ``/proc/*/environ`` (RANK / LOCAL_RANK; data
loader workers, which inherit them, are told apart by their parent; only this user's, unless
asked); ``ask`` and ``mechanisms`` ask each for a Flight Recorder dump (a request to
``frtrace.recorder`` through its registry, never a signal; the NCCL debug pipe; the worker
server) and take its Python stack (``py-spy dump``, the worker server's ``dump_traceback``),
each bounded in time; ``safety`` is how every file, pipe and socket a rank's environment names
is touched (never through a link, only the rank user's own; copies 0600, see SECURITY.md);
``keep`` makes sure a request never overwrites a dump the rank or its stall watch wrote;
``run`` does it for every rank at once and says per rank what was collected and how, and
what was not and why, and where no rank's dump was got, ``nextdump`` says the line that gets
them next time.
"""
