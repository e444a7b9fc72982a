"""The ground floor every stage stands on, importing nothing of frtrace but ``errors``.

``files``: where frtrace writes, and how (never through another user's link, private copies,
files replaced atomically); ``owned``: frtrace's own folders and files where others may share
the place (caches, spill), used only where they are this user's alone; ``heap``: how glibc's
malloc keeps memory in the command's process and a load worker's; ``progress``: what a long run
says on stderr while it works; ``printable``: text from a dump made safe to print; ``ranges``:
rank lists as compact ranges. Nothing here knows about dumps, hangs or reports.
"""
