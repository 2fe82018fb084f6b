"""python -m ucudnn: the doctor (ucudnn-doctor)."""

import sys

from .doctor import main

sys.exit(main())
