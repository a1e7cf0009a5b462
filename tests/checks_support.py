"""What every chapter's tests of its checks share: hostile stand-ins for student functions
and the assertions every printed check must satisfy."""

import builtins

from coursepkg import checks


class AlwaysEqual:
    """A result that claims to equal anything: must never pass a check."""

    def __eq__(self, other):
        return True

    __hash__ = None


class LeakyError(Exception):
    pass


def leaky(*args):
    """A student function whose exception message would reveal a hidden case's inputs."""
    raise LeakyError(repr(args))


def strip_raised(message):
    """A hidden case's message without its "raised X. " prefix (X a built-in type's name only,
    never the exception's own message)."""
    if message.startswith("raised "):
        name, _, rest = message[len("raised ") :].partition(". ")
        assert name == "an exception" or name in dir(builtins), message
        return rest
    return message


def check_output(capsys, task_id, func):
    """What ``check`` prints: it returns None and prints clean ASCII lines, no object ids."""
    assert checks.check(task_id, func) is None
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.isascii()
    assert " at 0x" not in out
    assert all(line == line.rstrip() for line in out.splitlines())
    return out
