"""Celery workers, the embedded runner and the ``baton`` command line.

First of all, before the seconds of imports that start ``baton``: Ctrl-C during them ends the process with
exit code 130 and one line, not a traceback (``workers.interrupt``).
"""

from workers.interrupt import quiet_at_top_level

quiet_at_top_level()
