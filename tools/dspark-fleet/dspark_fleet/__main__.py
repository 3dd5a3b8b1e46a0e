"""`python -m dspark_fleet` = `dspark-fleet`."""

import sys

from .cli import main

sys.exit(main())
