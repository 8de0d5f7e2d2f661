"""The command line: ``hookviz report|html|view|compare`` (:mod:`hookviz.cli.main`)."""
