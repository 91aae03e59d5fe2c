"""The command line's own error: a wrong argument or environment variable."""

__all__ = ["UsageError"]


class UsageError(Exception):
    """Printed in one line after the program's name; exit status 2."""
