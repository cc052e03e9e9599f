"""`python -m glassformer` is the same as the `glassformer` console script."""
import sys

from glassformer.cli import main

sys.exit(main())
