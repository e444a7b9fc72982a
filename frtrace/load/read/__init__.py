"""One dump file in, its columns out: the only code that unpickles and knows torch's key names.

``parse`` reads one file (a pure function, run in the workers) through ``unpickle`` (the only
unpickler, with ``declared`` and ``framing`` checked first) or the C reader (``native``, over
``_scan.c`` and ``_tree.c``); ``formats`` says what differs between torch versions and
encodings; ``columns`` and ``entries`` make the validated columns (``plain`` lays them out for a
large set's worker file, ``arrays`` makes Arrow arrays from numpy buffers, ``interning`` stores
each distinct stack once, ``values`` reads any decoded value safely); ``filerows`` is the files
table's row of one file; ``wire`` carries a parsed file's batch as plain buffers to the parent.
"""
