"""Entry script of the bundled application (PyInstaller runs this file)."""

import multiprocessing
import sys

from flyviz.cli import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    sys.exit(main())
