"""Job side: what runs inside (or next to) the training job, not in the analysis.

``env`` is the environment recipe that makes every rank record and dump (``frtrace env``);
``recorder`` is the in-process dump helper (``frtrace.recorder``). Nothing here imports the
analysis, pandas or (at import time) torch: a training script pays nothing for it.
"""
