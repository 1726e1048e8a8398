"""`python -m keras_transformer ...` runs the `keras-transformer` command line."""

import sys

from keras_transformer.cli import main

sys.exit(main())
