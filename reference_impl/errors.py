class InputError(ValueError):
    """A user mistake: the message is one line saying what is wrong and how to fix it."""
