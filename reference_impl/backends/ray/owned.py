"""State with one writer: an object an instance's loop thread owns refuses writes from any other thread.

The loop claims its state when it starts (`InstanceLoop.claim`); from then on another thread that sets one of its
attributes gets `ForeignWrite` instead of a silent race: it must post a message to the loop (messages.py).
Copies made with `dataclasses.replace` are unclaimed (what the loop publishes for others to read)."""
import threading


class ForeignWrite(RuntimeError):
    pass


class Owned:
    _owner = None  # thread id of the owner once claimed (not a dataclass field: absent from asdict and replace)

    def claim(self) -> None:
        object.__setattr__(self, "_owner", threading.get_ident())

    def __setattr__(self, name: str, value) -> None:
        owner = self._owner
        if owner is not None and owner != threading.get_ident():
            raise ForeignWrite(f"{type(self).__name__}.{name} set from thread {threading.get_ident()}, but thread "
                               f"{owner} owns it: post a message to its loop instead")
        object.__setattr__(self, name, value)
