"""Every performance figure of winnow beside its baseline: the same as `winnow bench`.

python scripts/bench.py            # about 5 minutes
python scripts/bench.py --quick    # about a minute
"""

import sys

from winnow.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
