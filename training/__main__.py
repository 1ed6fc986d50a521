"""``python -m training ...``: the ``train`` command (see :mod:`training.cli`)."""

from training.cli import train

if __name__ == "__main__":
    train(prog_name="python -m training")
