"""Granted to cooperative workers by test_coop_surface.py: the process that imported it."""

import os

IMPORT_PID = os.getpid()
