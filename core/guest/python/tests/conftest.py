import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # core/guest/python: the sandtrap_guest package
sys.path.insert(0, HERE)  # portable_helpers
