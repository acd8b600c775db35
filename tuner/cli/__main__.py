"""`python -m tuner.cli`: the same as the `tuner` command."""

import sys

from tuner.cli.app import main

sys.exit(main())
