"""``python -m hookviz``: the command line (:mod:`hookviz.cli.main`)."""

from hookviz.cli.main import main

if __name__ == "__main__":
    main()
