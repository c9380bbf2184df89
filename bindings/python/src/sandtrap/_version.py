"""The sandtrap package version (the library reports its own, see ``library_version``)."""

__version__ = "0.1.0"
