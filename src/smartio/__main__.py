import sys

from smartio.cli import main

sys.exit(main())
