import sys

from dnsside.cli import main

sys.exit(main())
