"""python -m ucudnn: the doctor (ucudnn-doctor); python -m ucudnn curve: the step's time-memory
curve from a recorded profile (ucudnn.curve_cli)."""

import sys

if sys.argv[1:2] == ["curve"]:
    from .curve_cli import main
    sys.exit(main(sys.argv[2:]))

from .doctor import main  # noqa: E402

sys.exit(main())
