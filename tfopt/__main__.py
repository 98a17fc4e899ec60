"""``python -m tfopt`` runs the command line, like the ``tfopt`` script."""

from tfopt.cli import main

if __name__ == "__main__":
    main()
