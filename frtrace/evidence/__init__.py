"""What else a hung job left beside its dumps: files in, each rank's failures out.

A stage beside ``load`` and ``pystack``. A job leaves more than Flight Recorder dumps: the
recorder's sidecar says what made each rank dump (an exception, with its message), torchelastic's
``@record`` writes an ``error.json`` per failed rank, torchrun ``--log-dir`` keeps each rank's
stdout and stderr, ``--tee`` and ``srun -l`` prefix every line with the rank. ``discover`` finds
those files, ``logs`` and ``errorfile`` read them, ``messages`` says what each failure is (a
*cause*: an exception in user code, a crash, OOM, a CUDA error; or a *symptom*: a timeout, a
peer that closed the connection, a watchdog abort) and which ranks or ops it names. Everything
comes out as ``model.Failure`` records, one ``JobEvidence`` per directory; NCCL RAS's answers
beside the dumps (``ras``) ride along on it. stdlib only; a file
that cannot be read is one line in ``JobEvidence.problems``, never the analysis.
"""
