"""The machine's load, kept beside real measurements on a shared machine."""
import os


def load_1m() -> float:
    """The 1-minute load average, to two decimals."""
    return round(os.getloadavg()[0], 2)
